"""The SFT project chain in the experiment registry: 64 -> 63 / 65 -> 62, each handing a sealed manifest
down (see tools.core.handoff). In the GPU batch the chain runs in order (70-79): a real_gpu project
reads only real_gpu manifests, so 64's CPU admission runs there too. Each stage takes its project's
three gate functions from the plan's mechanism (the notebook passes the learner's)."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment


def add_upstream_arguments(parser) -> None:
    """The flags of a project that reads an upstream manifest."""
    parser.add_argument("--upstream-label", dest="upstream_label", default=None,
                        help="the label of the upstream project's run (default: this run's label)")
    parser.add_argument("--upstream-sha256", dest="upstream_sha256", action="append", type=promise, default=None,
                        metavar="ID=SHA256", help="the sha256 promised for an upstream project's manifest, repeatable "
                                                  "(required in real_gpu; default in cpu_smoke: its seal alone is checked)")


def promise(text: str) -> tuple[str, str]:
    """`ID=SHA256` as a pair (argparse reports a ValueError as a bad value)."""
    project, sep, digest = text.partition("=")
    if not sep or not project or len(digest) != 64:
        raise ValueError(f"expected ID=SHA256 (a project id and 64 hex digits), got {text!r}")
    return project, digest


def add_selection_arguments(parser) -> None:
    """Project 63's flags: the upstream ones, the memory budget and the split selection reads."""
    add_upstream_arguments(parser)
    parser.add_argument("--memory-budget", dest="memory_budget", type=int, default=None,
                        help="bytes a candidate may use (default: the run mode's budget)")
    parser.add_argument("--selection-split", dest="selection_split", default="validation",
                        help="the split selection reads (only validation is allowed; the evaluation split is 62's)")


def add_branch_arguments(parser) -> None:
    """Project 65's flags: the upstream ones and the split the branch reads."""
    add_upstream_arguments(parser)
    parser.add_argument("--selection-split", dest="selection_split", default="validation",
                        help="the split the branch reads (only validation is allowed; the evaluation split is 62's)")


EXPERIMENTS = (
    Experiment(
        name="sft_data_admission",
        title="64 SFT data admission: every blocker merged, leakage by text and by problem identity against the "
              "frozen evaluation split, accept / tune / reject with repair under a new version; the evaluation split "
              "sealed apart",
        chapters=("64",),
        runner="tools.experiments.sft_chain.admission:run",
        stages=("admission",),
        default_stage="admission",
        mechanism=("merge_blockers", "find_leaks", "admission_transition"),
        device_steps=(DeviceStep("chain_64_admission", "sft_data_admission", order=70, stage="admission", max_s=60),),
    ),
    Experiment(
        name="lora_selection",
        title="63 LoRA variant selection: ranks 4 / 8 / 16 x 3 shared seeds on 64's admitted data, read on the "
              "validation split against the no-adapter base: comparability, task gain, kept base skill, "
              "non-inferiority to the best within a margin, memory budget, the cheapest feasible rank",
        chapters=("63",),
        runner="tools.experiments.sft_chain.selection:run",
        stages=("selection",),
        default_stage="selection",
        arguments="tools.experiments.sft_chain.experiment:add_selection_arguments",
        mechanism=("comparable_candidates", "gate_candidates", "choose_candidate"),
        device_steps=(DeviceStep("chain_63_selection", "lora_selection", order=72, stage="selection", max_s=150,
                                 upstreams=("64",)),),
    ),
    Experiment(
        name="sft_delivery",
        title="62 SFT training delivery: 63's chosen configuration trained on 3 seeds, saved, resumed and reloaded "
              "in fresh processes, identity checked from the files, the sealed evaluation split opened once against "
              "the base; delivered / needs_rerun / blocked / rejected, with a model card, a merged export and a "
              "rollback manifest",
        chapters=("62",),
        runner="tools.experiments.sft_chain.delivery:run",
        stages=("delivery",),
        default_stage="delivery",
        arguments="tools.experiments.sft_chain.experiment:add_upstream_arguments",
        mechanism=("upstream_identity", "artifact_checks", "delivery_state"),
        device_steps=(DeviceStep("chain_62_delivery", "sft_delivery", order=76, stage="delivery", max_s=150,
                                 upstreams=("63", "65")),),
    ),
    Experiment(
        name="qlora_branch",
        title="65 QLoRA low-resource branch: NF4 vs bf16 base at the chain's adapter settings, paired by seed on "
              "the validation split, a capacity ladder recorded apart, accept only for capacity the budget needs",
        chapters=("65",),
        runner="tools.experiments.sft_chain.qlora:run",
        stages=("branch",),
        default_stage="branch",
        arguments="tools.experiments.sft_chain.experiment:add_branch_arguments",
        mechanism=("paired_deltas", "capacity_gain", "branch_decision"),
        device_steps=(DeviceStep("chain_65_qlora", "qlora_branch", order=74, stage="branch", max_s=150,
                                 upstreams=("64",)),),
    ),
)
