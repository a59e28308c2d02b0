"""Tests of the lab models (`tools.models.lab`) and of sampling and exact-match (`tools.models.lab_sampling`).

The two named models come from the session fixture `lab_models` (the committed weights, or with
COURSE_LAB_MODELS=build the models built under the numerics in force); determinism and caching are
checked on shortened recipes in temporary folders, and a slow test rebuilds the student from its recipe.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil

import pytest
import torch

from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.models import lab, lab_sampling
from tools.models.architectures import CHAT_TEMPLATE, IDENTITY_FILE
from tools.models.builders import build_tiny_tokenizer
from tools.models.loading import load_causal_lm, model_identity, resolve_model

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

SHORT = {"max_steps": 6, "target_validation": 1.01, "check_every": 3, "validation_problems": 32, "warmup_steps": 2}


@pytest.fixture(scope="module")
def student(lab_models):
    return load_causal_lm(lab_models["lab"])


@pytest.fixture(scope="module")
def teacher(lab_models):
    return load_causal_lm(lab_models["lab-teacher"])


def test_student_sits_between_40_and_80_percent_and_the_teacher_above_90(student, teacher, lab_models):
    measured = {}
    for name, (model, tokenizer) in (("lab", student), ("lab-teacher", teacher)):
        result = lab_sampling.exact_match(model, tokenizer, "add", "heldout")
        assert result["total"] == len(lab_tasks.problems("add", "heldout"))
        recorded = lab.lab_identity(lab_models[name])["heldout_exact_match"]
        assert recorded["correct"] == result["correct"]  # the figure in the identity file is the loaded model's
        measured[name] = result["accuracy"]
    assert lab.STUDENT_QUALITY_BAND[0] <= measured["lab"] <= lab.STUDENT_QUALITY_BAND[1], measured
    assert measured["lab-teacher"] >= 0.9, measured
    sizes = {name: lab.lab_identity(folder)["parameters"] for name, folder in lab_models.items()}
    assert sizes["lab-teacher"] > sizes["lab"]


def test_the_student_stopped_at_its_validation_target_and_the_teacher_decayed_after_its_own(lab_models):
    student, teacher = (lab.lab_identity(lab_models[name])["pretraining"] for name in ("lab", "lab-teacher"))
    for name, history in (("lab", student), ("lab-teacher", teacher)):
        recipe = lab.recipe_for(name)
        assert history["stopped_by"] == "validation_target"
        reached = history["target_reached_at"]
        checks = [entry for entry in history["validation"] if entry["step"] <= reached]
        assert checks[-1]["exact_match"] >= recipe.target_validation
        assert all(entry["exact_match"] < recipe.target_validation for entry in checks[:-1])
        assert history["steps"] == reached + recipe.decay_steps == len(history["losses"])
    assert teacher["validation"][-1]["exact_match"] >= 0.9
    assert teacher["losses"][-1] < teacher["losses"][0] / 10


def test_lab_models_are_qwen2_folders_with_the_tiny_tokenizer_and_chat_template(lab_models, student):
    model, tokenizer = student
    assert model.config.model_type == "qwen2" and model.config.architectures == ["Qwen2ForCausalLM"]
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    config = json.loads((lab_models["lab"] / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "Qwen2Tokenizer"
    tiny = build_tiny_tokenizer()
    prompt = lab_tasks.make_problem("add", 34, 57).prompt
    assert lab.prompt_ids(tokenizer, prompt) == lab.prompt_ids(tiny, prompt)
    identity = model_identity(lab_models["lab"])
    assert identity["weights"] == "pretrained" and identity["source"] == "lab_pretraining"
    assert identity["lab"]["task"] == "add" and 0.4 <= identity["lab"]["heldout_exact_match"] <= 0.8


def test_pretraining_never_sees_a_held_out_or_validation_problem(lab_models):
    for name in lab.LAB_RECIPES:
        recipe = lab.recipe_for(name)
        trained = {problem.content_sha256 for problem in lab.pretraining_problems(recipe)}
        assert len(trained) > 6000
        for split in ("heldout", "validation"):
            assert not trained & {p.content_sha256 for p in lab_tasks.problems(recipe.task, split)}
        recorded = lab.lab_identity(lab_models[name])["task"]["splits"]["train"]
        assert recorded["content_sha256"] == hashlib.sha256("".join(sorted(trained)).encode()).hexdigest()


def test_the_second_task_is_one_the_student_does_not_know_yet(student):
    model, tokenizer = student
    sums = lab_tasks.sample_problems("add", "heldout", 120, seed=5)
    second = [lab_tasks.make_problem(lab_tasks.SECOND_TASK, p.a, p.b) for p in sums]
    known = lab_sampling.exact_match(model, tokenizer, problems=sums)
    new = lab_sampling.exact_match(model, tokenizer, problems=second)
    assert known["accuracy"] >= 0.35
    assert new["accuracy"] <= 0.25 and new["accuracy"] < known["accuracy"] / 2
    assert new["content_sha256"] == known["content_sha256"]  # the same sums, another task


def test_resolve_model_builds_or_finds_the_lab_models(lab_models):
    assert resolve_model("lab") == lab_models["lab"]
    assert resolve_model("lab-teacher", "random_init") == lab_models["lab-teacher"]
    with pytest.raises(ConfigError, match="unknown lab model"):
        lab.recipe_for("lab-huge")


def test_the_committed_weights_are_loaded_by_default_and_checked_against_recipe_and_hashes(tmp_path, monkeypatch):
    monkeypatch.delenv(lab.LAB_SOURCE_ENV, raising=False)
    for name in lab.LAB_RECIPES:
        folder = lab.build_lab_model(name)
        assert folder == lab.committed_lab_folder(name) == resolve_model(name)
        identity = json.loads((folder / IDENTITY_FILE).read_text(encoding="utf-8"))
        assert identity["recipe_sha256"] == lab.recipe_sha256(lab.recipe_for(name))
        assert identity["lab"]["cpu_numerics"]["torch_cpu_capability"] == "AVX2"  # built under the pinned profile
    # a copy of the committed folder with one changed byte, or from another recipe, is refused with the fix
    copy = tmp_path / "lab_weights"
    shutil.copytree(lab.COMMITTED_LAB_DIR, copy)
    monkeypatch.setattr(lab, "COMMITTED_LAB_DIR", copy)
    assert lab.build_lab_model("lab") == copy / "lab"
    weights = copy / "lab" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    with pytest.raises(ConfigError, match="differs from the hash.*lab-commit"):
        lab.build_lab_model("lab")
    monkeypatch.setitem(lab.LAB_RECIPES, "lab-teacher", lab.shortened("lab-teacher", learning_rate=1e-3))
    with pytest.raises(ConfigError, match="another recipe"):
        lab.build_lab_model("lab-teacher")
    monkeypatch.setenv(lab.LAB_SOURCE_ENV, "downloaded")
    with pytest.raises(ConfigError, match="COURSE_LAB_MODELS='downloaded'"):
        lab.build_lab_model("lab")


def test_commit_refuses_any_numerics_but_the_pinned_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pytest.raises(ConfigError, match="pinned numerics"):
        lab.commit_lab_models(tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_rebuilding_the_student_from_its_recipe_lands_in_the_committed_quality_band(tmp_path):
    """The builder stays the source of truth: rebuilt here (under whatever numerics are in force) the
    student need not have the committed bits, but it must stop at its target and sit in the same band."""
    committed = lab.lab_identity(lab.committed_lab_folder("lab"))
    rebuilt = lab.lab_identity(lab.build_lab_model("lab", tmp_path))
    assert rebuilt["pretraining"]["stopped_by"] == "validation_target"
    for identity in (committed, rebuilt):
        assert lab.STUDENT_QUALITY_BAND[0] <= identity["heldout_exact_match"]["accuracy"] <= lab.STUDENT_QUALITY_BAND[1]
    print(f"committed {committed['heldout_exact_match']['accuracy']:.3f} ({committed['weights_sha256'][:12]}), "
          f"rebuilt {rebuilt['heldout_exact_match']['accuracy']:.3f} ({rebuilt['weights_sha256'][:12]}) "
          f"under {rebuilt['cpu_numerics']}")


def test_the_same_recipe_gives_the_same_weights_and_another_seed_other_weights(tmp_path):
    recipe = lab.shortened("lab", **SHORT)
    first = lab.build_lab_model(recipe=recipe, cache_dir=tmp_path / "a")
    second = lab.build_lab_model(recipe=recipe, cache_dir=tmp_path / "b")
    reseeded = lab.build_lab_model(recipe=lab.shortened("lab", seed=recipe.seed + 1, **SHORT), cache_dir=tmp_path / "a")
    hashes = [lab.lab_identity(folder)["weights_sha256"] for folder in (first, second, reseeded)]
    assert hashes[0] == hashes[1] and hashes[0] != hashes[2]
    assert first.name == second.name != reseeded.name  # the recipe hash names the folder


def test_a_built_model_is_reused_and_a_changed_recipe_gets_its_own_folder(tmp_path):
    recipe = lab.shortened("lab", **SHORT)
    folder = lab.build_lab_model(recipe=recipe, cache_dir=tmp_path)
    written = (folder / "model.safetensors").stat().st_mtime_ns
    assert lab.build_lab_model(recipe=recipe, cache_dir=tmp_path) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    other = lab.build_lab_model(recipe=lab.shortened("lab", learning_rate=1e-3, **SHORT), cache_dir=tmp_path)
    assert other != folder and other.parent == folder.parent
    identity = json.loads((folder / IDENTITY_FILE).read_text(encoding="utf-8"))
    assert identity["recipe_sha256"] == lab.recipe_sha256(recipe)
    assert identity["lab"]["pretraining"]["steps"] == SHORT["max_steps"]
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ", encoding="utf-8")
    with pytest.raises(ConfigError, match="changed after it was built"):
        lab.build_lab_model(recipe=recipe, cache_dir=tmp_path)


def test_the_learning_rate_warms_up_holds_and_decays_after_the_target():
    recipe = lab.shortened("lab", warmup_steps=10, decay_steps=20, learning_rate=1.0)
    assert lab.learning_rate_at(recipe, 0) == pytest.approx(0.1)
    assert lab.learning_rate_at(recipe, 9) == lab.learning_rate_at(recipe, 500) == pytest.approx(1.0)
    decay = [lab.learning_rate_at(recipe, step, decay_from=100) for step in range(95, 121)]
    assert decay[:6] == [pytest.approx(1.0)] * 6
    assert decay[6] == pytest.approx(0.95) and decay[-2] == pytest.approx(0.05) and decay[-1] == 0.0
    assert all(later < earlier for earlier, later in itertools.pairwise(decay[5:]))


def test_a_short_run_stops_at_its_target_and_decays(tmp_path):
    recipe = lab.shortened("lab", target_validation=0.0, decay_steps=4, check_every=3, validation_problems=32,
                           warmup_steps=2)
    history = lab.lab_identity(lab.build_lab_model(recipe=recipe, cache_dir=tmp_path))["pretraining"]
    assert history["target_reached_at"] == 3 and history["steps"] == 7 and len(history["losses"]) == 7
    never = lab.shortened("lab", target_validation=1.01, max_steps=5, check_every=3, validation_problems=32)
    history = lab.lab_identity(lab.build_lab_model(recipe=never, cache_dir=tmp_path))["pretraining"]
    assert history["stopped_by"] == "max_steps" and history["steps"] == 5 and history["target_reached_at"] is None


def test_an_invalid_recipe_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="unknown lab task"):
        lab.build_lab_model(recipe=lab.shortened("lab", task="mul"), cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="LabRecipe"):
        lab.build_lab_model(recipe={"name": "lab"}, cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())


# --- sampling ------------------------------------------------------------------------------------------------------

PROMPTS = [lab_tasks.make_problem("add", a, b).prompt for a, b in ((34, 57), (12, 45), (88, 99))]


def test_sample_returns_n_samples_per_prompt_with_ids_text_logprobs_and_finish_reason(student):
    model, tokenizer = student
    samples = lab_sampling.sample(model, tokenizer, PROMPTS, n=4, temperature=1.0, max_new_tokens=6, seed=1)
    assert [(s["prompt_index"], s["sample_index"]) for s in samples] == [(p, k) for p in range(3) for k in range(4)]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for item in samples:
        assert item["prompt"] == PROMPTS[item["prompt_index"]]
        assert item["prompt_ids"] == lab.prompt_ids(tokenizer, item["prompt"])
        assert len(item["logprobs"]) == len(item["response_ids"]) >= 1
        assert all(value <= 0.0 for value in item["logprobs"])
        assert item["text"] == tokenizer.decode(item["response_ids"], skip_special_tokens=True)
        if item["finish_reason"] == "stop":
            assert item["response_ids"][-1] == end and end not in item["response_ids"][:-1]
        else:
            assert item["finish_reason"] == "length" and len(item["response_ids"]) == 6
    assert any(item["finish_reason"] == "stop" for item in samples)


def test_sampling_is_seeded_and_leaves_the_global_rng_and_the_mode_alone(student):
    model, tokenizer = student
    model.train()
    state = torch.random.get_rng_state()
    first = lab_sampling.sample(model, tokenizer, PROMPTS, n=8, temperature=1.5, max_new_tokens=4, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert model.training
    model.eval()
    again = lab_sampling.sample(model, tokenizer, PROMPTS, n=8, temperature=1.5, max_new_tokens=4, seed=7)
    other = lab_sampling.sample(model, tokenizer, PROMPTS, n=8, temperature=1.5, max_new_tokens=4, seed=8)
    assert first == again
    assert [s["response_ids"] for s in first] != [s["response_ids"] for s in other]


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampling_log_probs_equal_a_teacher_forced_forward_pass(student, temperature):
    model, tokenizer = student
    samples = lab_sampling.sample(model, tokenizer, PROMPTS, n=5, temperature=temperature, max_new_tokens=5, seed=3)
    recomputed = lab_sampling.response_logprobs(model, [s["prompt_ids"] for s in samples],
                                                [s["response_ids"] for s in samples], temperature=temperature)
    for item, values in zip(samples, recomputed):
        assert values == pytest.approx(item["logprobs"], abs=1e-4)
    if temperature != 1.0:  # the policy's log-probs, not the model's at temperature 1
        plain = lab_sampling.response_logprobs(model, [samples[0]["prompt_ids"]], [samples[0]["response_ids"]])
        assert plain[0] != pytest.approx(samples[0]["logprobs"], abs=1e-3)


def test_greedy_sampling_takes_the_argmax_and_reports_the_model_log_probs(student):
    model, tokenizer = student
    samples = lab_sampling.sample(model, tokenizer, PROMPTS, temperature=0.0, max_new_tokens=6)
    for item in samples:
        ids = torch.tensor([item["prompt_ids"] + item["response_ids"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(item["prompt_ids"]) - 1:-1]
        assert logits.argmax(-1).tolist() == item["response_ids"]
        assert torch.log_softmax(logits, -1).max(-1).values.tolist() == pytest.approx(item["logprobs"], abs=1e-4)


def test_a_too_short_budget_ends_by_length(student):
    model, tokenizer = student
    samples = lab_sampling.sample(model, tokenizer, PROMPTS, n=2, temperature=1.0, max_new_tokens=1, seed=0)
    assert {s["finish_reason"] for s in samples} == {"length"}
    assert all(len(s["response_ids"]) == 1 for s in samples)


def test_invalid_sampling_arguments_are_refused(student):
    model, tokenizer = student
    assert lab_sampling.sample(model, tokenizer, PROMPTS[:1], temperature=0.0, max_new_tokens=2)
    bad = [{"prompts": []}, {"prompts": "one prompt"}, {"prompts": [""]}, {"n": 0}, {"temperature": -1.0},
           {"temperature": float("nan")}, {"max_new_tokens": 0}, {"batch_size": 0}]
    for change in bad:
        arguments = {"prompts": PROMPTS[:1], "n": 1, "temperature": 1.0, "max_new_tokens": 2, **change}
        with pytest.raises(ConfigError):
            lab_sampling.sample(model, tokenizer, arguments.pop("prompts"), **arguments)
    with pytest.raises(ConfigError):
        lab_sampling.response_logprobs(model, [[1, 2]], [[3], [4]])


def test_score_samples_and_exact_match_use_the_task_verifier(student):
    model, tokenizer = student
    problems = lab_tasks.sample_problems("add", "heldout", 40, seed=11)
    greedy = lab_sampling.sample(model, tokenizer, [p.messages() for p in problems], temperature=0.0, max_new_tokens=5)
    scored = lab_sampling.score_samples(problems, greedy)
    assert [s["correct"] for s in scored] == [s["text"].strip() == str(p.label) for s, p in zip(greedy, problems)]
    assert all(s["reward"] == float(s["correct"]) for s in scored)
    result = lab_sampling.exact_match(model, tokenizer, problems=problems)
    assert result["correct"] == sum(s["correct"] for s in scored) and result["total"] == 40
    assert 0 < result["correct"] < 40  # the student knows some sums, not all
    assert "correct_by_problem" not in result
    each = lab_sampling.exact_match(model, tokenizer, problems=problems, per_problem=True)
    assert each["correct_by_problem"] == [bool(s["correct"]) for s in scored] and each["correct"] == result["correct"]
    with pytest.raises(ConfigError):
        lab_sampling.score_samples(problems[:1], greedy[1:2] + [{**greedy[0], "prompt_index": 5}])


def test_the_command_line_builds_and_describes_the_lab_models(lab_models, capsys):
    from tools.models.__main__ import main

    assert main(["lab-build", "--name", "lab"]) == 0
    output = capsys.readouterr().out
    assert str(lab_models["lab"]) in output and "heldout_exact_match=" in output
