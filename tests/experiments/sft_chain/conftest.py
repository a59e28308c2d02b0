"""The SFT chain's first three stages in cpu_smoke, run once for every module of this folder that needs them."""

from __future__ import annotations

import pytest

from tools.experiments.contract import Plan, run

CHAIN_LABEL = "chain_stages"
UPSTREAM_STAGES = (("sft_data_admission", "64"), ("lora_selection", "63"), ("qlora_branch", "65"))


@pytest.fixture(scope="session")
def chain_upstream(tmp_path_factory):
    """64, 63 and 65 with the package's functions on one label: `(results folder, {chapter: {stage: ref}})`.
    test_chain_stages runs 62 on top of them and test_step5_learner plants a learner's function in a rerun of
    one of them; both modules share an xdist group, so the three stages train once per `make test` pass."""
    results = tmp_path_factory.mktemp("chain_results")
    refs = {}
    for experiment, chapter in UPSTREAM_STAGES:
        refs[chapter] = {ref.stage: ref for ref in run(Plan(experiment=experiment, chapter=chapter,
                                                            run_mode="cpu_smoke", label=CHAIN_LABEL,
                                                            results_dir=results))}
    return results, refs
