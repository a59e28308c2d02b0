"""PT-REWARD-MODEL's library: examples, figures, the stage's Bradley-Terry code and the framework checks."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT
from tools.chapters import reward_model as chapter
from tools.chapters import tensor_checks
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.experiments.reward import bradley_terry
from tools.experiments.reward.masks import read_last

EXERCISES = ("pairwise_reward_loss", "calibrate_temperature", "reward_model_gate")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, with the names its setup cell imports."""
    notebook = read_notebook(find_chapter("PT-REWARD-MODEL", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch, "F": F, **{name: getattr(tensor_checks, name) for name in dir(tensor_checks)
                                                          if name.startswith("check_")}}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


@pytest.fixture(scope="module")
def tiny_reward_model(tiny_model_dir, one_cpu_thread):
    return chapter.load_reward_model(tiny_model_dir)


@pytest.mark.slow  # drives TRL's RewardTrainer
def test_framework_checks_match_transformers_and_trl(tiny_reward_model, reference):
    model, tokenizer = tiny_reward_model
    head = chapter.compare_with_transformers(model, tokenizer, reference["pairwise_reward_loss"])
    assert head["matches"] and set(head["padding"]) == {"right", "left", "right, pad = eos"}
    right, left = head["padding"]["right"]["positions"], head["padding"]["left"]["positions"]
    assert right["chosen"] != left["chosen"], "the two paddings put the last token in different columns"
    for side in ("right", "left"):
        assert head["padding"][side]["attention_mask_max_abs_diff"] <= chapter.FRAMEWORK_TOLERANCE
    eos = head["padding"]["right, pad = eos"]
    assert eos["max_abs_diff"] <= chapter.FRAMEWORK_TOLERANCE, "the readout mask reads the token transformers reads"
    assert eos["attention_mask_max_abs_diff"] > 1e-3, "the attention mask's last 1 is the trailing eos, not that token"
    assert all(a == b + 1 for a, b in zip(eos["attention_mask_positions"]["chosen"], eos["positions"]["chosen"]))
    assert model.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id, "the check restores the config"
    loss = chapter.compare_with_trl(model, tokenizer, reference["pairwise_reward_loss"])
    assert loss["matches"] and loss["abs_diff"] <= chapter.FRAMEWORK_TOLERANCE and loss["margins"] == [0.5, 0.0, 1.0]
    info = chapter.framework()
    assert info["libraries"] == {"transformers": "5.9.0", "trl": "1.16.0"}


@pytest.mark.slow  # drives TRL's RewardTrainer
def test_framework_checks_catch_a_wrong_token_and_a_wrong_margin(tiny_reward_model, reference):
    model, tokenizer = tiny_reward_model

    def last_column(chosen_scores, chosen_mask, rejected_scores, rejected_mask, margins=None):
        full = torch.ones_like(chosen_mask), torch.ones_like(rejected_mask)
        return reference["pairwise_reward_loss"](chosen_scores, full[0], rejected_scores, full[1], margins)

    def margin_added(chosen_scores, chosen_mask, rejected_scores, rejected_mask, margins=None):
        return reference["pairwise_reward_loss"](chosen_scores, chosen_mask, rejected_scores, rejected_mask,
                                                 None if margins is None else -margins)

    head = chapter.compare_with_transformers(model, tokenizer, last_column)
    assert not head["matches"] and head["padding"]["right"]["max_abs_diff"] > 1e-4
    assert head["padding"]["left"]["max_abs_diff"] <= chapter.FRAMEWORK_TOLERANCE, "left padding hides that mistake"
    assert not chapter.compare_with_trl(model, tokenizer, margin_added)["matches"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stage_bradley_terry_agrees_with_the_chapter_reference(reference, seed):
    generator = torch.Generator().manual_seed(seed)
    chosen, rejected = torch.randn(5, 6, generator=generator, dtype=torch.float64), torch.randn(5, 4, generator=generator,
                                                                                                 dtype=torch.float64)
    chosen_mask, rejected_mask = torch.ones(5, 6, dtype=torch.long), torch.ones(5, 4, dtype=torch.long)
    chosen_mask[:, :seed], rejected_mask[:, 4 - seed:] = 0, 0
    rejected_mask[:, 0] = 1
    margins = torch.rand(5, generator=generator, dtype=torch.float64)
    taught = reference["pairwise_reward_loss"](chosen, chosen_mask, rejected, rejected_mask, margins)
    ours = bradley_terry.pairwise_loss(read_last(chosen, chosen_mask), read_last(rejected, rejected_mask), margins)
    assert torch.allclose(ours, taught["loss"], atol=1e-12)
    margin_list = (torch.randn(9, generator=generator, dtype=torch.float64) * 4).tolist()
    labels = [bool(value > 0.3) for value in torch.rand(9, generator=generator).tolist()]
    grid = [0.5, 1.0, 2.0, 4.0]
    assert bradley_terry.fit_temperature(margin_list, labels, grid, n_bins=4) == pytest.approx(
        reference["calibrate_temperature"](margin_list, labels, grid, n_bins=4), rel=1e-12)


def test_calibration_example_is_overconfident_and_fitting_helps():
    fitted = bradley_terry.fit_temperature(chapter.CALIBRATION_MARGINS, chapter.CALIBRATION_LABELS, chapter.TEMPERATURE_GRID)
    right = sum((margin > 0) == label for margin, label in zip(chapter.CALIBRATION_MARGINS, chapter.CALIBRATION_LABELS))
    assert right == 8 and fitted["temperature"] > 1 and fitted["ece_after"] < fitted["ece_before"] / 2


def test_best_of_n_moves_true_quality_only_with_a_correlated_proxy():
    noise = chapter.best_of_n_curve(0.0, [1, 16])
    good = chapter.best_of_n_curve(0.9, [1, 16])
    assert noise["proxy"][1] - noise["proxy"][0] > 1.0 and good["proxy"][1] - good["proxy"][0] > 1.0
    assert abs(noise["quality"][1]) < 0.1 and good["quality"][1] > 1.2


def test_example_pairs_cover_both_paddings():
    example = chapter.example_pairs()
    assert example["chosen_mask"][0, -1] == 0 and example["chosen_mask"][1, 0] == 0
    assert example["rejected_mask"][1, 0] == 0 and example["rejected_mask"][2, -1] == 0


def test_figures_draw():
    for figure in (chapter.draw_readout(chapter.example_pairs()), chapter.draw_bradley_terry(),
                   chapter.draw_reliability(chapter.CALIBRATION_MARGINS, chapter.CALIBRATION_LABELS, 8.0),
                   chapter.draw_overoptimisation(sizes=(1, 4), correlations=(0.0, 0.9))):
        assert figure.axes
        matplotlib.pyplot.close(figure)


def test_pad_rows_left_and_right():
    ids, mask = chapter.pad_rows([[5, 6, 7], [8]], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = chapter.pad_rows([[5, 6, 7], [8]], pad_id=0, side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]


EFFECT_SEEDS = (0, 1, 2, 3, 4)
GAP_MARGIN = 0.25


@pytest.mark.effect
@pytest.mark.slow  # the stage on the lab model, five seeds of two reward models each (about 10 s per seed on one core)
def test_on_the_lab_model_the_candidate_beats_the_mislabelled_control(lab_models, tmp_path, one_cpu_thread):
    """The stage with cpu_smoke's pairs, five seeds in one record: on hidden pairs whose rejected replies use
    templates no training pair used, the reward model trained on correct labels beats the control trained on the
    same pairs with half of them swapped by a paired effect whose whole interval lies above the gate's gap (0.25);
    the gate accepts on every seed; the calibration error the gate reads is measured on the hidden pairs, not on
    the calibration pairs the temperature was fitted on."""
    from tools.core import effects
    from tools.experiments.contract import Plan, run
    from tools.experiments.reward import reward_model_stage as stage

    plan = Plan(experiment="reward_model", chapter="PT-REWARD-MODEL", run_mode="cpu_smoke", label="effect",
                results_dir=tmp_path, model="lab", seeds=EFFECT_SEEDS, options=chapter.STEP5_CPU_SPLIT)
    (ref,) = run(plan)
    record = ref.load()
    assert record["status"] == "ok", record.get("error")
    for entry in record["per_seed"]:
        assert entry["candidate"]["hidden_pairs"] == 64 and entry["gate"]["decision"] == "accept_mechanism", entry["gate"]
        for kind, templates in (("train", stage.TRAIN_TEMPLATES), ("calibration", stage.TRAIN_TEMPLATES),
                                (("hidden", stage.HIDDEN_TEMPLATES))):
            assert all(pair["rejected"] in {template.format(n=pair["label"]) for template in templates}
                       for pair in entry["pairs"][kind]), kind
        assert entry["candidate"]["hidden_calibration"]["temperature"] == entry["candidate"]["calibration"]["temperature"]
    found = record["effects"]["candidate_over_control"]
    assert found["seeds"] == list(EFFECT_SEEDS)
    assert effects.holds(found, GAP_MARGIN), effects.describe(found)
    assert record["decision"]["decision"] == "accept_mechanism"
    assert any("candidate" in line for line in chapter.gate_lines(record)) and len(chapter.effect_sentences(record)) == 3
    figure = chapter.draw_gate(record, {"candidate": 1.0, "control": 0.5})
    assert figure.axes
    matplotlib.pyplot.close(figure)


@pytest.mark.effect
@pytest.mark.slow  # the stage on the lab model twice, one seed each (two reward models per run)
def test_a_planted_wrong_loss_changes_the_step5_decision(lab_models, tmp_path, one_cpu_thread):
    """Step 5 trains with the learner's functions: the same run(plan) the notebook calls, once with the chapter's
    reference loss and once with a planted mistake (grading mutant `sign_flipped`: rejected minus chosen). The
    reference candidate ranks the hidden pairs far above its control and the gate accepts; the planted loss trains
    the candidate to prefer the rejected replies, and the gate rejects."""
    from planted import learner_mechanism, mutant, references

    from tools.experiments.contract import Plan, run

    namespace = {"math": math, "torch": torch, "F": F, **{name: getattr(tensor_checks, name) for name in dir(tensor_checks)
                                                          if name.startswith("check_")}}
    taught = references("PT-REWARD-MODEL", EXERCISES, namespace)
    name, wrong = mutant("PT-REWARD-MODEL", "sign_flipped", namespace)
    outcomes = {}
    for label, functions in (("reference", taught), ("planted", {**taught, name: wrong})):
        plan = Plan(experiment="reward_model", chapter="PT-REWARD-MODEL", run_mode="cpu_smoke", label=label,
                    results_dir=tmp_path, model="lab", seeds=(0,), options=chapter.STEP5_CPU_SPLIT,
                    mechanism=learner_mechanism(functions))
        (ref,) = run(plan)
        outcomes[label] = ref.load()
    accuracy = {label: record["per_seed"][0]["candidate"]["hidden_accuracy"] for label, record in outcomes.items()}
    assert outcomes["planted"]["mechanism"]["pairwise_reward_loss"]["source"] == "learner"
    assert outcomes["reference"]["decision"]["decision"] == "accept_mechanism", accuracy
    assert outcomes["planted"]["decision"]["decision"] == "reject" and accuracy["planted"] < 0.5 < accuracy["reference"]
