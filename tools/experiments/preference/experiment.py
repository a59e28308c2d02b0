"""The preference experiments in the experiment registry: chapter 17's DPO beta sweep (a GPU-batch step),
PT-DPO-FAMILY's side-by-side losses, and PT-KTO's binary-label runs and 51's online rounds (CPU: the original
course registered no GPU result for them)."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment


def add_dpo_arguments(parser) -> None:
    """The sweep's own knobs (None keeps the run mode's default)."""
    parser.add_argument("--pairs", type=int, default=None, help="preference pairs to train on")
    parser.add_argument("--steps", type=int, default=None, help="full-batch DPO updates per beta")
    parser.add_argument("--learning-rate", dest="learning_rate", type=float, default=None)


def add_family_arguments(parser) -> None:
    """The DPO family's own knobs (None keeps the run mode's default)."""
    parser.add_argument("--steps", type=int, default=None, help="full-batch updates per variant")
    parser.add_argument("--learning-rate", dest="learning_rate", type=float, default=None)
    parser.add_argument("--noise-rate", dest="noise_rate", type=float, default=None,
                        help="share of training pairs swapped for the noisy runs")


EXPERIMENTS = (
    Experiment(
        name="dpo_beta_sweep",
        title=("DPO on pairs from the model's own samples, beta 0.05 / 0.10 / 0.30 from the same start, beside a "
               "mislabelled control; the beta decision"),
        chapters=("17",),
        runner="tools.experiments.preference.dpo_sweep:run",
        stages=("sweep",),
        default_stage="sweep",
        variants="tools.experiments.preference.dpo_sweep:variant_names",
        arguments="tools.experiments.preference.experiment:add_dpo_arguments",
        mechanism=("sequence_logprobs", "dpo_loss", "judge_beta_sweep"),
        device_steps=(DeviceStep("dpo_17", "dpo_beta_sweep", order=50, stage="sweep", chapter="17", max_s=240),),
    ),
    Experiment(
        name="dpo_family",
        title="The DPO family (DPO, IPO, hinge, robust, cDPO, RPO, LD-DPO, SimPO, ORPO) from one start, clean and noisy labels",
        chapters=("PT-DPO-FAMILY",),
        runner="tools.experiments.preference.family_runs:run",
        stages=("compare",),
        default_stage="compare",
        variants="tools.experiments.preference.family_runs:variant_names",
        arguments="tools.experiments.preference.experiment:add_family_arguments",
        mechanism=("length_desensitised_logps", "dpo_family_loss", "reference_free_loss"),
    ),
    Experiment(
        name="kto_binary",
        title=("KTO from the verifier's binary labels: a balanced set beside a shuffled-label control, and an "
               "imbalanced one with and without weights, measured on held-out replies"),
        chapters=("PT-KTO",),
        runner="tools.experiments.preference.kto_runs:run",
        stages=("train",),
        default_stage="train",
        variants="tools.experiments.preference.kto_runs:variant_names",
        mechanism=("kto_reference_point", "kto_loss", "kto_class_weights"),
    ),
    Experiment(
        name="online_dpo",
        title=("Online (iterative) DPO rounds: the serving version's own samples, an adoption gate, a guard metric "
               "and rollback, and a round whose judge prefers wrong answers (the gate's control)"),
        chapters=("51",),
        runner="tools.experiments.preference.online_runs:run",
        stages=("rounds",),
        default_stage="rounds",
        mechanism=("build_online_pairs", "adoption_gate", "guard_rollback"),
    ),
    Experiment(
        name="offline_dpo",
        title=("84 offline DPO: from 62's delivered adapter, preference pairs admitted (prompt and response "
               "truncation apart), DPO beside a mislabelled control on 3 seeds, the held-out pairs judged in both "
               "orders, and accept / tune / reject against 62's adapter with a regression gate"),
        chapters=("84",),
        runner="tools.experiments.preference.offline_project:run",
        stages=("candidate",),
        default_stage="candidate",
        arguments="tools.experiments.sft_chain.experiment:add_upstream_arguments",
        mechanism=("admit_pairs", "independent_evaluation", "adoption_decision"),
        device_steps=(DeviceStep("chain_84_offline_dpo", "offline_dpo", order=78, stage="candidate", max_s=150,
                                 upstreams=("62",)),),
    ),
)
