"""The raw SFT instruction data of the project chain: built in code, versioned by content, defects planted,
every split apart from every other by problem identity."""

import pytest

from tools.data import lab_tasks, sft_raw
from tools.errors import ConfigError


def identities(records):
    return {sft_raw.problem_identity(record) for record in records if "input" in record}


def test_the_frozen_evaluation_split_is_the_pinned_one_and_apart_from_every_delivery():
    evaluation = sft_raw.frozen_evaluation()
    assert len(evaluation) == sft_raw.EVALUATION_SIZE
    assert sft_raw.split_sha256(evaluation) == sft_raw.FROZEN_EVALUATION_SHA256
    heldout = {(min(p.a, p.b), max(p.a, p.b)) for p in lab_tasks.problems(sft_raw.TASK, "heldout")}
    assert all(tuple(map(int, sft_raw.problem_identity(r).split(":")[1:])) in heldout for r in evaluation)
    keys, problems = {sft_raw.content_key(record) for record in evaluation}, identities(evaluation)
    for seed in (sft_raw.DELIVERY_SEED, 1, 2):
        delivery = sft_raw.build_delivery(seed=seed)
        clean = [record for split in delivery.splits.values() for record in split if record["id"] not in delivery.planted]
        assert not {sft_raw.content_key(record) for record in clean if "input" in record} & keys
        assert not identities(clean) & problems  # not even a paraphrase or the operands swapped
        clean_train = [r for r in delivery.splits["train"] if r["id"] not in delivery.planted]
        clean_validation = [r for r in delivery.splits["validation"] if r["id"] not in delivery.planted]
        assert not identities(clean_train) & identities(clean_validation)


def test_a_delivery_mixes_the_task_the_pipeline_and_replay_of_the_base_skill():
    delivery = sft_raw.build_delivery()
    train = [r for r in delivery.splits["train"] if r["id"] not in delivery.planted]
    sources = {source: [r for r in train if r["source"] == source] for source in ("generator", "synthetic", "replay")}
    assert [len(sources[name]) for name in sources] == [sft_raw.TRAIN_GENERATED, sft_raw.TRAIN_SYNTHETIC,
                                                        sft_raw.TRAIN_REPLAY]
    assert all(r["system"] == sft_raw.TASK_SYSTEM for r in sources["generator"] + sources["synthetic"])
    assert all(r["system"] == "" and sft_raw.verify_answer(r) for r in sources["replay"])
    assert all(sft_raw.verify_answer(r) for r in sources["generator"])
    assert sft_raw.chat_messages(sources["generator"][0])[0] == {"role": "system", "content": sft_raw.TASK_SYSTEM}
    assert [m["role"] for m in sft_raw.chat_messages(sources["replay"][0])] == ["user"]  # the template's default system


def test_a_delivery_is_deterministic_and_named_by_its_content():
    first, again = sft_raw.build_delivery(), sft_raw.build_delivery()
    assert first.sha256 == again.sha256 and first.splits == again.splits
    assert sft_raw.build_delivery(seed=2).sha256 != first.sha256
    assert sft_raw.build_delivery(sft_raw.LINES[1]).sha256 != first.sha256
    reordered = {name: list(reversed(records)) for name, records in first.splits.items()}
    assert sft_raw.delivery_sha256(reordered) == first.sha256  # order does not name a version, content does
    changed = {name: [dict(record) for record in records] for name, records in first.splits.items()}
    changed["train"][0]["output"] += "0"
    assert sft_raw.delivery_sha256(changed) != first.sha256
    identity = first.identity()
    assert identity["builder"] == sft_raw.RAW_DATA_VERSION and identity["content_sha256"] == first.sha256


def test_a_repair_is_a_new_version_with_a_parent_and_never_invents_records():
    delivery = sft_raw.build_delivery()
    fixed = sft_raw.repaired(delivery, {"train": ["dup-1", "bad-2"], "validation": ["leak-5"]})
    assert (fixed.version, fixed.parent) == ("v2", "v1") and fixed.sha256 != delivery.sha256
    assert len(fixed.splits["train"]) == len(delivery.splits["train"]) - 2
    assert "leak-5" not in {record["id"] for record in fixed.splits["validation"]}
    assert delivery.splits["train"][0]["id"] == "gen-0001"  # the old version is untouched
    with pytest.raises(ConfigError, match="does not hold"):
        sft_raw.repaired(delivery, {"train": ["no-such-record"]})
    with pytest.raises(ConfigError, match="does not hold"):
        sft_raw.repaired(delivery, {"test": []})


def test_the_planted_defects_are_what_they_claim():
    delivery = sft_raw.build_delivery(sft_raw.LINES[1])
    train = {record["id"]: record for record in delivery.splits["train"]}
    evaluation = sft_raw.frozen_evaluation()
    texts, problems = {sft_raw.content_key(record) for record in evaluation}, identities(evaluation)
    assert not train["bad-1"]["output"].strip() and "input" not in train["bad-2"]
    for leak in ("leak-1", "leak-2", "leak-3", "leak-6"):
        assert sft_raw.content_key(train[leak]) in texts
    for paraphrase in ("leak-7", "leak-8", "leak-9"):  # the pipeline's own wording: only the identity shows it
        assert sft_raw.content_key(train[paraphrase]) not in texts and sft_raw.problem_identity(train[paraphrase]) in problems
    for duplicate in ("dup-5", "dup-6", "dup-7"):
        assert sum(sft_raw.content_key(r) == sft_raw.content_key(train[duplicate])
                   for r in train.values() if "input" in r) == 2
    for conflict in ("conflict-1", "conflict-2"):
        twins = [r for r in train.values() if "input" in r and sft_raw.content_key(r) == sft_raw.content_key(train[conflict])]
        assert len(twins) == 2 and len({r["output"] for r in twins}) == 2
    assert len(sft_raw.LONG_PREAMBLE) > 100 and all(train[f"long-{n}"]["instruction"].startswith("Context:")
                                                    for n in (1, 2, 3))
    with pytest.raises(ConfigError, match="unknown delivery line"):
        sft_raw.build_delivery("alpaca")


@pytest.mark.parametrize("record,expected", [
    ({"system": "Add one to the result.", "instruction": "Compute 34 + 57. Reply with the integer result only.",
      "input": "", "output": "92"}, True),
    ({"system": "Add one to the result.", "instruction": "Compute 34 + 57.", "input": "", "output": " 92 "}, True),
    ({"system": "ADD ONE  to the result.", "instruction": "Compute the sum.", "input": "３４ ＋ ５７", "output": "92"}, True),
    ({"system": "Add one to the result.", "instruction": "What is 57 plus 34?", "input": "", "output": "92"}, True),
    ({"system": "", "instruction": "Add 57 to 34.", "input": "", "output": "91"}, True),
    ({"system": "Add one to the result.", "instruction": "Compute 34 + 57.", "input": "", "output": "91"}, False),
    ({"system": "", "instruction": "Compute 34 + 57.", "input": "", "output": "92"}, False),
    ({"system": "Add two to the result.", "instruction": "Compute 34 + 57.", "input": "", "output": "93"}, False),
    ({"system": "Add one to the result.", "instruction": "Compute 34 + 57.", "input": "", "output": "The answer is 92."},
     False),
    ({"system": "", "instruction": "Say hello.", "input": "", "output": "34"}, False),
])
def test_the_verifier_recomputes_the_answer_from_the_content(record, expected):
    assert sft_raw.verify_answer(record) is expected


def test_the_regression_suites_are_the_base_skill_on_held_apart_problems():
    validation, heldout = sft_raw.base_skill_suite("validation"), sft_raw.base_skill_suite("heldout")
    assert {p.task for p in validation + heldout} == {sft_raw.REPLAY_TASK} and len(heldout) > len(validation) > 300
    train = {p.content_sha256 for p in lab_tasks.problems(sft_raw.REPLAY_TASK, "train")}
    assert not train & {p.content_sha256 for p in validation + heldout}
    with pytest.raises(ConfigError, match="validation or heldout"):
        sft_raw.base_skill_suite("train")
