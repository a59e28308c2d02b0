"""The raw SFT instruction data of the project chain: built in code, versioned by content, defects planted."""

import pytest

from tools.data import sft_raw
from tools.errors import ConfigError


def test_the_frozen_evaluation_split_is_the_pinned_one_and_apart_from_every_delivery():
    evaluation = sft_raw.frozen_evaluation()
    assert len(evaluation) == sft_raw.EVALUATION_SIZE
    assert sft_raw.split_sha256(evaluation) == sft_raw.FROZEN_EVALUATION_SHA256
    keys = {sft_raw.content_key(record) for record in evaluation}
    for seed in (sft_raw.DELIVERY_SEED, 1, 2):
        delivery = sft_raw.build_delivery(seed=seed)
        clean = [record for split in delivery.splits.values() for record in split if record["id"] not in delivery.planted]
        assert not {sft_raw.content_key(record) for record in clean if "input" in record} & keys


def test_a_delivery_is_deterministic_and_named_by_its_content():
    first, again = sft_raw.build_delivery(), sft_raw.build_delivery()
    assert first.sha256 == again.sha256 and first.splits == again.splits
    assert sft_raw.build_delivery(seed=2).sha256 != first.sha256
    assert sft_raw.build_delivery("arith-sub-conflicting").sha256 != first.sha256
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
    delivery = sft_raw.build_delivery("arith-sub-conflicting")
    train = {record["id"]: record for record in delivery.splits["train"]}
    evaluation = {sft_raw.content_key(record) for record in sft_raw.frozen_evaluation()}
    assert not train["bad-1"]["output"].strip() and "input" not in train["bad-2"]
    for leak in ("leak-1", "leak-2", "leak-3", "leak-6"):
        assert sft_raw.content_key(train[leak]) in evaluation
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
    ({"instruction": "Compute 81 - 47. Reply with the integer result only.", "input": "", "output": "34"}, True),
    ({"instruction": "Compute 81 - 47.", "input": "", "output": " 34 "}, True),
    ({"instruction": "Compute the difference.", "input": "８１ － ４７", "output": "34"}, True),
    ({"instruction": "Subtract 47 from 81.", "input": "", "output": "34"}, True),
    ({"instruction": "What is 81 minus 47?", "input": "", "output": "34"}, True),
    ({"instruction": "Compute 81 - 47.", "input": "", "output": "35"}, False),
    ({"instruction": "Compute 81 - 47.", "input": "", "output": "The answer is 34."}, False),
    ({"instruction": "Say hello.", "input": "", "output": "34"}, False),
])
def test_the_verifier_recomputes_the_answer_from_the_content(record, expected):
    assert sft_raw.verify_answer(record) is expected
