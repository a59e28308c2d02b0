"""Tests of tools.data.lab_tasks: every problem of a lab task, its split by content hash, the verifier."""

import hashlib
import json
import operator
import re

import pytest

from tools.data import arithmetic, lab_tasks
from tools.errors import ConfigError

REFERENCE = {"add": operator.add, "sub": operator.sub}


def test_every_task_has_problems_in_every_split_and_about_a_tenth_held_out():
    for name in lab_tasks.TASKS:
        counts = {split: len(lab_tasks.problems(name, split)) for split in lab_tasks.SPLITS}
        total = len(lab_tasks.problems(name))
        assert sum(counts.values()) == total and min(counts.values()) > 100
        assert 0.07 < counts["heldout"] / total < 0.13, counts
        assert 0.03 < counts["validation"] / total < 0.07, counts


def test_splits_are_disjoint_by_content_hash_and_the_hash_is_independent_of_the_format():
    by_split = {split: {p.content_sha256 for p in lab_tasks.problems("add", split)} for split in lab_tasks.SPLITS}
    assert not by_split["train"] & by_split["heldout"]
    assert not by_split["train"] & by_split["validation"]
    assert not by_split["validation"] & by_split["heldout"]
    equation = {split: {p.content_sha256 for p in lab_tasks.problems("add_equation", split)}
                for split in lab_tasks.SPLITS}
    assert equation == by_split  # a held-out sum is held out in every format


def test_content_hash_is_the_sha256_of_operation_and_operands():
    problem = lab_tasks.make_problem("add", 34, 57)
    expected = hashlib.sha256(json.dumps({"a": 34, "b": 57, "operation": "add"}, separators=(",", ":"))
                              .encode()).hexdigest()
    assert problem.content_sha256 == expected
    assert problem.split == lab_tasks.split_of(expected)
    assert lab_tasks.make_problem("add", 57, 34).content_sha256 != expected


def test_labels_targets_prompts_and_system_instructions():
    for name, spec in lab_tasks.TASKS.items():
        for problem in lab_tasks.problems(name)[::97]:
            answer = REFERENCE[spec.operation](problem.a, problem.b)
            assert 10 <= problem.a <= 99 and 10 <= problem.b <= 99
            # the user turn is tools.data.arithmetic's prompt, whatever the task
            assert problem.prompt == arithmetic.make_task("x", spec.operation, problem.a, problem.b).prompt
            assert str(answer) not in re.findall(r"\d+", problem.prompt)
            assert problem.messages()[-1] == {"role": "user", "content": problem.prompt}
            if spec.system is None:
                assert len(problem.messages()) == 1
            else:
                assert problem.messages()[0] == {"role": "system", "content": spec.system}
            expected = {"integer": (answer, str(answer)), "plus_one": (answer + 1, str(answer + 1)),
                        "equation": (answer, f"{problem.a} + {problem.b} = {answer}")}[spec.answer_format]
            assert (problem.label, problem.target) == expected
            assert not {"label", "target"} & set(problem.public_view())
    assert all(p.a >= p.b for p in lab_tasks.problems("sub"))
    assert len(lab_tasks.problems("add")) == 90 * 90
    assert lab_tasks.TASKS[lab_tasks.SECOND_TASK].system is not None  # a task the pretraining never showed


def test_the_verifier_reads_integer_replies_with_the_arithmetic_parser():
    problem = lab_tasks.make_problem("add", 34, 57)
    assert lab_tasks.verify(problem, "91") == {"parsed": 91, "correct": True, "format_ok": True}
    assert lab_tasks.verify(problem, " 91\n")["correct"]
    assert lab_tasks.verify(problem, "90") == {"parsed": 90, "correct": False, "format_ok": True}
    for text in ("91.", "The answer is 91", "34 + 57 = 91", "", None):
        assert lab_tasks.verify(problem, text) == {"parsed": None, "correct": False, "format_ok": False}


def test_the_verifier_of_plus_one_wants_the_sum_plus_one():
    problem = lab_tasks.make_problem("add_plus_one", 34, 57)
    assert lab_tasks.verify(problem, "92") == {"parsed": 92, "correct": True, "format_ok": True}
    assert lab_tasks.verify(problem, "91") == {"parsed": 91, "correct": False, "format_ok": True}
    assert lab_tasks.verify(problem, "92.")["correct"] is False


def test_the_verifier_of_the_equation_format_checks_operands_and_result():
    problem = lab_tasks.make_problem("add_equation", 34, 57)
    assert lab_tasks.verify(problem, "34 + 57 = 91") == {"parsed": 91, "correct": True, "format_ok": True}
    assert lab_tasks.verify(problem, "34 + 57 = 90") == {"parsed": 90, "correct": False, "format_ok": True}
    assert lab_tasks.verify(problem, "34 + 58 = 91")["correct"] is False
    assert lab_tasks.verify(problem, "34 - 57 = 91")["correct"] is False
    for text in ("91", "34+57=91", "34 + 57 = 91.", "", None):
        assert lab_tasks.verify(problem, text)["correct"] is False, text


def test_sample_problems_is_seeded_and_checks_its_count():
    first = lab_tasks.sample_problems("add", "heldout", 50, seed=3)
    assert first == lab_tasks.sample_problems("add", "heldout", 50, seed=3)
    assert first != lab_tasks.sample_problems("add", "heldout", 50, seed=4)
    assert len({p.content_sha256 for p in first}) == 50 and {p.split for p in first} == {"heldout"}
    for count in (0, -1, 10 ** 6, 2.5, True):
        with pytest.raises(ConfigError):
            lab_tasks.sample_problems("add", "heldout", count, seed=3)


def test_unknown_task_or_split_is_refused():
    with pytest.raises(ConfigError, match="unknown lab task"):
        lab_tasks.problems("mul")
    with pytest.raises(ConfigError, match="unknown split"):
        lab_tasks.problems("add", "test")
    assert lab_tasks.problems("add", "train")  # valid input still works


def test_manifest_names_each_split_by_count_and_hash():
    manifest = lab_tasks.manifest("add")
    assert manifest["version"] == lab_tasks.LAB_TASK_VERSION
    assert {split: entry["count"] for split, entry in manifest["splits"].items()} == \
        {split: len(lab_tasks.problems("add", split)) for split in lab_tasks.SPLITS}
    assert len({entry["content_sha256"] for entry in manifest["splits"].values()}) == 3
