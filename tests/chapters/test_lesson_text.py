"""The lesson text of `tools/chapters` lives in one string table (`lesson_text.toml`), not in code."""

from __future__ import annotations

import ast
import re

import pytest

from chapter_factory import REPO_ROOT
from tools.chapters import lesson_text
from tools.errors import ConfigError

CHAPTERS = REPO_ROOT / "tools" / "chapters"
CHINESE = re.compile(r"[\u4e00-\u9fff]")


def string_constants(path) -> list[tuple[int, str]]:
    """Every string literal of a module, f-string parts included, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_chinese_sentence_is_built_in_code():
    found = [f"{path.name}:{line}" for path in sorted(CHAPTERS.rglob("*.py"))
             for line, value in string_constants(path) if CHINESE.search(value)]
    assert found == []


def keys_named_in_code() -> set[str]:
    sections = set(lesson_text.table())
    return {value for path in sorted(CHAPTERS.rglob("*.py")) for _, value in string_constants(path)
            if re.fullmatch(r"[a-z_]+\.[a-z_]+", value) and value.split(".")[0] in sections}


def test_every_entry_is_used_and_every_used_entry_exists():
    table = {f"{section}.{key}" for section, entries in lesson_text.table().items() for key in entries}
    assert keys_named_in_code() == table


def test_an_entry_takes_exactly_its_fields():
    assert lesson_text.text("verl.checks_all_passed", passed=3, total=4, status="ok") == "检查：3/4 项通过，状态 `ok`。"
    with pytest.raises(ConfigError, match="takes the fields"):
        lesson_text.text("verl.checks_all_passed", passed=3, total=4)
    with pytest.raises(ConfigError, match="takes the fields"):
        lesson_text.text("verl.checks_all_passed", passed=3, total=4, status="ok", extra=1)
    with pytest.raises(ConfigError, match="no entry"):
        lesson_text.text("verl.no_such_sentence")


def test_a_sentence_in_code_would_be_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""说明。"""\nvalue = f"共 {3} 条"\n', encoding="utf-8")
    assert {line for line, value in string_constants(probe) if CHINESE.search(value)} == {2}


def _effect(lower, upper):
    return {"metric": None, "seeds": [0, 1, 2], "treatment": [0.0] * 3, "control": [0.0] * 3, "differences": [0.0] * 3,
            "mean": (lower + upper) / 2, "sd": 0.0, "lower": lower, "upper": upper, "confidence": 0.95,
            "method": "student_t_over_paired_seed_differences"}


@pytest.mark.parametrize("interval", [(0.1, 0.3), (0.01, 0.3), (-0.1, 0.3), (-0.3, -0.1)])
def test_every_branch_of_the_reward_pages_effect_sentences_fills_its_entry(interval):
    """The four reward pages choose a sentence by where an interval lies; every branch fills its entry."""
    from tools.chapters import ppo, reward_model, reward_signal, rloo

    low, high = interval
    ppo_record = {"status": "ok", "min_gain_over_control": 0.05, "results": [{}] * 3,
                  "effects": {"exact_match_over_control": _effect(low, high), "exact_match_over_start": _effect(low, high),
                              "critic_over_constant": _effect(low, high), "critic_over_control": _effect(low, high)}}
    assert len(ppo.effect_sentences(ppo_record)) == 3
    model_record = {"status": "ok", "settings": {"min_gap": 0.25, "split": {"hidden": 64}},
                    "per_seed": [{"control": {"hidden_accuracy": 0.4}}, {"control": {"hidden_accuracy": 0.6}}],
                    "effects": {"candidate_over_control": _effect(low, high),
                                "unseen_over_seen_templates": _effect(low, high)}}
    assert len(reward_model.effect_sentences(model_record)) == 3
    same = {"name": "same_score_no_baseline", "advantage_spread": 0.0, "whitened_abs_max": 0.0,
            "reasons": ["constant_advantages"]}
    signal_record = {"status": "ok", "per_seed": [{"candidates": [same]}],
                     "effects": {"kl_share_control_over_baseline": _effect(low, high)}}
    assert len(reward_signal.effect_sentences(signal_record)) == 2
    split = {"loo_over_none": {"measured": 2.0, "advantage_part": 0.9, "independent_rewards_advantage_part": 0.95,
                               "norm_part": 1.8, "residual": 1.2},
             "wrong_over_right": {"count_part": 2.0, "norm_part": 3.0}}
    rloo_record = {"status": "ok", "per_seed": [{"seed": 0, "rewarded_share": 0.3, "splits": split}],
                   "effects": {"log_squared_norm_unrewarded_over_rewarded": _effect(low, high),
                               "log_variance_loo_over_none": _effect(low, high)}}
    assert len(rloo.finding_sentences(rloo_record)) == 3
    for record, build in ((ppo_record, ppo.effect_sentences), (model_record, reward_model.effect_sentences),
                          (signal_record, reward_signal.effect_sentences)):
        assert len(build({**record, "effects": None})) == 1, "no interval: one sentence that says so"
