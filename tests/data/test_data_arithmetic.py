"""Tests of tools.data.arithmetic: the fixed pool, its identity, labels and the response parser."""

import operator
import re

import pytest

from tools.data import arithmetic as at
from tools.errors import ConfigError

# Independent reference for the labels (not the module's own table).
REFERENCE = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv}


def test_pool_has_two_problems_of_each_operation_in_fixed_order():
    pool = at.build_task_pool()
    assert len(pool.tasks) == 8
    assert [t.operation for t in pool.tasks] == ["add", "add", "sub", "sub", "mul", "mul", "floordiv", "floordiv"]
    assert len({t.task_id for t in pool.tasks}) == 8
    assert pool.manifest()["operations"] == {"add": 2, "sub": 2, "mul": 2, "floordiv": 2}


def test_labels_come_from_integer_arithmetic():
    for task in at.build_task_pool().tasks:
        assert isinstance(task.label, int)
        assert task.label == REFERENCE[task.operation](task.a, task.b)


def test_no_prompt_contains_its_label():
    for seed in range(30):
        for task in at.generate_tasks(seed):
            assert str(task.label) not in re.findall(r"\d+", task.prompt), (seed, task)
            assert "label" not in task.public_view()


def test_pool_is_fixed_by_its_seed_and_hash():
    first, second = at.build_task_pool(7), at.build_task_pool(7)
    assert first.tasks == second.tasks and first.sha256 == second.sha256
    other = at.build_task_pool(8)
    assert other.sha256 != first.sha256
    assert first.version == at.TASK_VERSION
    assert len(first.sha256) == 64


def test_pool_hash_changes_when_one_task_changes():
    tasks = list(at.generate_tasks())
    changed = tasks[:-1] + [at.make_task(tasks[-1].task_id, "floordiv", tasks[-1].a + 1, tasks[-1].b)]
    assert at.pool_sha256(changed) != at.pool_sha256(tasks)
    assert at.pool_sha256(tasks, version="other/v9") != at.pool_sha256(tasks)


def test_manifest_entries_carry_task_and_prompt_hashes():
    pool = at.build_task_pool()
    entry = pool.manifest()["tasks"][0]
    assert entry["task_sha256"] == at.task_sha256(pool.tasks[0])
    assert entry["prompt_sha256"] == at.prompt_sha256(pool.tasks[0].prompt)
    assert at.task_from_record(entry) == pool.tasks[0]


def test_tampered_label_in_a_record_is_refused():
    entry = at.build_task_pool().manifest()["tasks"][2]
    entry["label"] += 1
    with pytest.raises(ConfigError, match="recomputed"):
        at.task_from_record(entry)


@pytest.mark.parametrize("text, expected", [
    ("41", 41), (" 41\n", 41), ("-7", -7), ("+3", 3), ("0", 0),
    ("41.", None), ("The answer is 41", None), ("41 apples", None), ("4 1", None), ("", None), (None, None),
    ("16.0", None), ("1,000", None),
])
def test_parser_reads_only_a_whole_integer_response(text, expected):
    assert at.parse_integer_response(text) == expected


def test_score_response_compares_with_the_label():
    task = at.make_task("sub-x", "sub", 81, 47)
    assert task.label == 34
    assert at.score_response(task, "34") == {"parsed": 34, "correct": True}
    assert at.score_response(task, "24") == {"parsed": 24, "correct": False}
    assert at.score_response(task, "It is 34") == {"parsed": None, "correct": False}


def test_invalid_inputs_are_config_errors():
    with pytest.raises(ConfigError):
        at.make_task("x", "pow", 2, 3)
    with pytest.raises(ConfigError):
        at.make_task("x", "floordiv", 2, 0)
    with pytest.raises(ConfigError):
        at.generate_tasks(per_operation=0)
