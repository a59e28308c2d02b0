"""Project 84's preference pairs, built in code: fixed, split apart, and carrying what the admission must see."""

from __future__ import annotations

from tools.data import lab_tasks, preference_pairs, sft_raw


def test_the_pairs_are_fixed_and_the_splits_never_share_a_problem():
    first, second = preference_pairs.build_pairs(), preference_pairs.build_pairs()
    assert first == second and {split: len(pairs) for split, pairs in first.items()} == \
        preference_pairs.SIZES["cpu_smoke"]
    problems = {split: {pair["content_sha256"] for pair in pairs} for split, pairs in first.items()}
    assert not problems["train"] & problems["validation"] and not problems["train"] & problems["evaluation"]
    assert not problems["validation"] & problems["evaluation"]
    assert all(lab_tasks.split_of(digest) == "heldout" for digest in problems["evaluation"])


def test_the_evaluation_pairs_leave_out_every_problem_project_62_opened():
    opened = {sft_raw.problem_identity(record) for record in sft_raw.frozen_evaluation()}
    for pair in preference_pairs.build_split("evaluation"):
        a, b = sorted(int(n) for n in pair["messages"][-1]["content"].split("Compute ")[1].split(".")[0].split(" + "))
        assert f"add:{a}:{b}" not in opened


def test_each_pair_prefers_the_sum_plus_one_over_the_plain_sum_and_the_plants_are_in_train():
    train = preference_pairs.build_split("train")
    planted = [pair["planted"] for pair in train if pair["planted"]]
    assert sorted(planted) == sorted(kind for kind, count in preference_pairs.PLANTED.items() for _ in range(count))
    for pair in preference_pairs.build_split("evaluation") + [pair for pair in train if not pair["planted"]]:
        assert int(pair["chosen"]) == int(pair["rejected"]) + 1
        assert pair["messages"][0] == {"role": "system", "content": sft_raw.TASK_SYSTEM}
    assert all(pair["chosen"] == pair["rejected"] for pair in train if pair["planted"] == "identical")
    assert all(pair["messages"][-1]["content"].startswith("Context:") for pair in train
               if pair["planted"] == "long_context")
    assert preference_pairs.pairs_sha256(train) != preference_pairs.pairs_sha256(train[1:])
