"""What the DISTILL-OPD notebook (on-policy distillation and GKD) runs around its three exercises.

The learner writes the mechanism: the per-token reverse KL of the student to the teacher on
student-sampled tokens, GKD's generalised Jensen-Shannon divergence, and the loss that mixes fixed
and on-policy sequences with the teacher isolated from the gradient. This module holds the figures
of Steps 1-3 (worked on small discrete distributions) and the framework check against TRL's GKD
`generalized_jsd_loss` on the same logits. Nothing here prints.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.core.environment import installed_version
from tools.experiments.distillation.gkd_reference import trl_generalized_jsd

CHAPTER_ID = "DISTILL-OPD"
FRAMEWORK_STAGE = "framework_check"
FRAMEWORK_TOLERANCE = 1e-5
"""Largest absolute difference allowed between TRL's loss and ours: float32 logits, losses of order 1,
the same formula up to the order of additions (observed differences are a few 1e-7)."""
FRAMEWORK_BETAS = (0.0, 0.1, 0.5, 0.9, 1.0)
FRAMEWORK_TEMPERATURES = (1.0, 2.0)
FRAMEWORK_SHAPE = (3, 6, 24)
MEASUREMENT_NOTE = ("equality check of the generalised JSD against TRL's GKD generalized_jsd_loss on seeded logits; "
                    "no model; not a GPU measurement")


# ---------------------------------------------------------------------------
# Steps 1-3: small discrete distributions
# ---------------------------------------------------------------------------

def _normalise(weights: Sequence[float]) -> list[float]:
    total = sum(weights)
    return [weight / total for weight in weights]


def bimodal_teacher(size: int = 40) -> list[float]:
    """A teacher distribution over `size` tokens with two separated modes, the left one larger."""
    return _normalise([0.6 * math.exp(-((i - 11) / 2.5) ** 2) + 0.4 * math.exp(-((i - 29) / 2.5) ** 2) + 1e-4
                       for i in range(size)])


def gaussian_student(mean: float, width: float, size: int = 40) -> list[float]:
    """A one-mode student distribution over `size` tokens."""
    return _normalise([math.exp(-((i - mean) / width) ** 2) + 1e-6 for i in range(size)])


def kl(p: Sequence[float], q: Sequence[float]) -> float:
    """KL(p || q) of two discrete distributions."""
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def best_single_mode_fits(teacher: Sequence[float]) -> dict[str, dict]:
    """The one-mode students that minimise the forward KL(teacher || student) and the reverse
    KL(student || teacher), by a grid search over the mode's position and width."""
    size = len(teacher)
    grid = [(mean / 2, width / 2) for mean in range(0, 2 * size) for width in range(2, 40)]
    fits = {}
    for name, divergence in (("forward", lambda s: kl(teacher, s)), ("reverse", lambda s: kl(s, teacher))):
        mean, width = min(grid, key=lambda point: divergence(gaussian_student(*point, size)))
        student = gaussian_student(mean, width, size)
        fits[name] = {"mean": mean, "width": width, "student": student, "forward_kl": kl(teacher, student),
                      "reverse_kl": kl(student, teacher)}
    return fits


def draw_forward_vs_reverse(teacher: Sequence[float], fits: Mapping[str, Mapping]):
    """Figure: a two-mode teacher and the one-mode students the forward and the reverse KL prefer."""
    import matplotlib.pyplot as plt

    tokens = range(len(teacher))
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.bar(tokens, teacher, color="#bdbdbd", label="teacher")
    ax.plot(tokens, fits["forward"]["student"], color="#2171b5", lw=2,
            label="student minimising KL(teacher || student): covers both modes")
    ax.plot(tokens, fits["reverse"]["student"], color="#cb181d", lw=2,
            label="student minimising KL(student || teacher): picks one mode")
    ax.set_xlabel("next token")
    ax.set_ylabel("probability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def jsd_beta(student: Sequence[float], teacher: Sequence[float], beta: float) -> float:
    """GKD's generalised JSD of two discrete distributions (TRL's convention, KLs at the ends)."""
    if beta == 0:
        return kl(teacher, student)
    if beta == 1:
        return kl(student, teacher)
    mixture = [beta * t + (1 - beta) * s for s, t in zip(student, teacher)]
    return beta * kl(teacher, mixture) + (1 - beta) * kl(student, mixture)


def draw_jsd_interpolation(student: Sequence[float], teacher: Sequence[float]):
    """Figure: JSD_beta against beta (left) and the scaled JSD_beta / beta and JSD_beta / (1 - beta),
    which reach the forward and the reverse KL at the two ends (right)."""
    import matplotlib.pyplot as plt

    betas = sorted({step / 100 for step in range(1, 100)} | {1e-4, 1e-3, 0.999, 0.9999})
    values = [jsd_beta(student, teacher, beta) for beta in betas]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    left.plot(betas, values, color="#6a51a3")
    left.set_xlabel("beta")
    left.set_ylabel("JSD_beta")
    left.set_title("the interpolation itself vanishes at both ends")
    right.plot(betas, [value / beta for value, beta in zip(values, betas)], label="JSD_beta / beta")
    right.plot(betas, [value / (1 - beta) for value, beta in zip(values, betas)], label="JSD_beta / (1 - beta)")
    right.axhline(kl(teacher, student), ls="--", color="#2171b5", label="KL(teacher || student): beta = 0")
    right.axhline(kl(student, teacher), ls=":", color="#cb181d", label="KL(student || teacher): beta = 1")
    right.set_xlabel("beta")
    right.set_ylim(0, 1.2 * max(kl(teacher, student), kl(student, teacher)))
    right.legend(fontsize=7)
    right.set_title("scaled, it reaches the two KLs")
    fig.tight_layout()
    return fig


def mixing_weights(on_policy: int, fixed: int, lam: float) -> dict[str, float]:
    """The weight of one sequence of each kind in the mixed loss: lam / on_policy, (1 - lam) / fixed."""
    return {"on_policy": lam / on_policy if on_policy else 0.0, "fixed": (1 - lam) / fixed if fixed else 0.0}


def draw_mixing_weights(on_policy: int = 2, fixed: int = 6, lams: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0)):
    """Figure: how much one on-policy and one fixed sequence weigh in the loss, per lambda."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    positions = range(len(lams))
    ax.bar([p - 0.2 for p in positions], [mixing_weights(on_policy, fixed, lam)["on_policy"] for lam in lams],
           width=0.4, color="#cb181d", label=f"one of {on_policy} on-policy sequences")
    ax.bar([p + 0.2 for p in positions], [mixing_weights(on_policy, fixed, lam)["fixed"] for lam in lams],
           width=0.4, color="#6baed6", label=f"one of {fixed} fixed sequences")
    ax.set_xticks(list(positions), [f"lambda = {lam}" for lam in lams])
    ax.set_ylabel("weight of one sequence in the loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


TEMPERATURE_COUNTEREXAMPLE = {"student": (0.0, 0.0, -2.0), "teacher": (0.0, 0.0, -20.0)}
"""Logits over three tokens on which a higher temperature makes both KLs larger, not smaller."""
TEMPERATURES = (1.0, 2.0, 4.0, 8.0)


def softmax(logits: Sequence[float], temperature: float = 1.0) -> list[float]:
    """softmax(logits / temperature) of a list of floats."""
    top = max(logits)
    weights = [math.exp((value - top) / temperature) for value in logits]
    return _normalise(weights)


def tempered_kls(student_logits: Sequence[float], teacher_logits: Sequence[float],
                 temperatures: Sequence[float] = TEMPERATURES) -> list[dict]:
    """Per temperature tau: the reverse KL(student || teacher) and the forward KL(teacher || student) of the
    two distributions softmax(logits / tau), and tau^2 times the forward KL (Hinton et al.'s soft-target term;
    TRL's GKD and DistillationTrainer divide the logits by tau and do not multiply by tau^2)."""
    rows = []
    for tau in temperatures:
        student, teacher = softmax(student_logits, tau), softmax(teacher_logits, tau)
        forward = kl(teacher, student)
        rows.append({"temperature": tau, "reverse_kl": kl(student, teacher), "forward_kl": forward,
                     "tau_squared_forward_kl": tau * tau * forward})
    return rows


def aggregation_batch():
    """Two sequences for the per-sequence vs per-token comparison: a one-token reply the student gets badly
    wrong and a four-token reply it nearly matches (float64 logits [2, 4, 3], a ragged mask)."""
    import torch

    teacher = torch.zeros(2, 4, 3, dtype=torch.float64)
    teacher[:, :, 0] = 4.0
    student = teacher.clone()
    student[0, 0] = torch.tensor([0.0, 3.0, 0.0], dtype=torch.float64)
    student[1, :, 0] = 3.5
    mask = torch.tensor([[True, False, False, False], [True, True, True, True]])
    return {"student": student, "teacher": teacher, "mask": mask}


def aggregation_comparison(mixed_distillation_loss: Callable, generalized_jsd: Callable) -> dict:
    """The same reverse KL averaged two ways on `aggregation_batch()`: per sequence and then over sequences
    (the chapter's mixed loss, lam = 1) and over every token at once (TRL's GKD, `generalized_jsd` with
    beta = 1). Per sequence, each of the B sequences weighs 1 / B whatever its length; per token, each of the
    N tokens weighs 1 / N, so a long sequence weighs its length."""
    batch = aggregation_batch()
    mask = batch["mask"]
    per_sequence = mixed_distillation_loss(batch["student"], batch["teacher"], mask, [True, True], 1.0)
    per_token = generalized_jsd(batch["student"], batch["teacher"], mask, 1.0, 1.0)
    lengths = [int(row.sum()) for row in mask]
    return {"lengths": lengths, "sequence_kl": per_sequence["sequence_kl"],
            "per_sequence": float(per_sequence["loss"]), "per_token": float(per_token["loss"]),
            "token_weights": {"per_sequence": [1 / (len(lengths) * n) for n in lengths],
                              "per_token": [1 / sum(lengths)] * len(lengths)}}


# ---------------------------------------------------------------------------
# The framework check: TRL's GKD generalized_jsd_loss on the same logits
# ---------------------------------------------------------------------------

def framework_logits(seed: int = 0) -> dict:
    """Seeded float32 student and teacher logits, a ragged mask, and nan where the mask is off."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(FRAMEWORK_SHAPE, generator=generator) * 2
    teacher = torch.randn(FRAMEWORK_SHAPE, generator=generator) * 2
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [False, True, True, True, True, False]])
    student[~mask] = float("nan")
    teacher[~mask] = float("nan")
    return {"student": student, "teacher": teacher, "mask": mask}


def framework() -> dict:
    return {"library": "trl", "version": installed_version("trl"),
            "reference_call": "trl.experimental.gkd.GKDTrainer.generalized_jsd_loss(student_logits, teacher_logits, "
                              "labels, beta, temperature, reduction='batchmean')",
            "betas": list(FRAMEWORK_BETAS), "temperatures": list(FRAMEWORK_TEMPERATURES),
            "tolerance_abs": FRAMEWORK_TOLERANCE}


def compare_with_trl(generalized_jsd: Callable) -> dict:
    """The learner's generalised JSD against TRL's on the same logits, for every beta and temperature.

    TRL's labels are -100 outside the mask; ours gets the mask itself."""
    logits = framework_logits()
    rows = []
    for beta in FRAMEWORK_BETAS:
        for temperature in FRAMEWORK_TEMPERATURES:
            theirs = trl_generalized_jsd(logits["student"], logits["teacher"], logits["mask"], beta, temperature)
            ours = float(generalized_jsd(logits["student"], logits["teacher"], logits["mask"], beta, temperature)["loss"])
            rows.append({"beta": beta, "temperature": temperature, "trl_loss": theirs, "our_loss": ours,
                         "abs_diff": abs(theirs - ours)})
    worst = max(row["abs_diff"] for row in rows)
    return {"framework": framework(), "shape": list(FRAMEWORK_SHAPE), "positions": int(logits["mask"].sum()),
            "rows": rows, "max_abs_diff": worst, "matches": worst <= FRAMEWORK_TOLERANCE}


def framework_lines(check: Mapping) -> list[str]:
    info = check["framework"]
    lines = [f"{info['library']} {info['version']} {info['reference_call']}",
             f"  logits {check['shape']} (float32), {check['positions']} masked-in positions; tolerance "
             f"{info['tolerance_abs']:g} (absolute)"]
    for row in check["rows"]:
        lines.append(f"  beta {row['beta']:<4} T {row['temperature']:<4} TRL {row['trl_loss']:.7f} ours "
                     f"{row['our_loss']:.7f} |diff| {row['abs_diff']:.1e}")
    lines.append(f"  max |diff| {check['max_abs_diff']:.1e} -> matches: {check['matches']}")
    return lines


def framework_record_body(check: Mapping) -> dict:
    return {"measurement": MEASUREMENT_NOTE,
            "inputs": {"logits_seed": 0, "shape": list(FRAMEWORK_SHAPE), "dtype": "float32", "device": "cpu"},
            "framework": dict(check["framework"]),
            "results": {key: check[key] for key in ("positions", "rows", "max_abs_diff", "matches")}}


def framework_summary(record: Mapping) -> list[str]:
    lines = [f"evidence level {record.get('evidence_level')}: an equality check against TRL, not a GPU measurement"]
    return lines + framework_lines({**record["results"], "framework": record["framework"],
                                    "shape": record["inputs"]["shape"]})[1:]


# ---------------------------------------------------------------------------
# Step 5.2: the lab teacher distilled into the lab student (experiment opd_distill)
# ---------------------------------------------------------------------------

DISTILL_EXPERIMENT = "opd_distill"
DISTILL_KINDS = ("on_policy", "fixed", "shuffled_teacher")
DISTILL_STAGES = tuple(f"distill_{kind}" for kind in DISTILL_KINDS)


def distill_lines(record: Mapping) -> list[str]:
    """Lines that show a distill_<kind> record: the student's held-out exact match before and after,
    the teacher's, the share of the gap closed, and the reverse KL averaged per sequence and per token."""
    if record.get("status") != "ok":
        return [f"{record.get('kind')}: status {record.get('status')}: {record.get('error')}"]
    settings = record["settings"]
    first, last = record["steps"][0], record["steps"][-1]
    return [f"{record['kind']} ({record['divergence']}, seed {settings['seed']}, {settings['steps']} steps x "
            f"{settings['prompts_per_step']} prompts, lr {settings['learning_rate']:g}): student held-out exact match "
            f"{record['before']['accuracy']:.3f} -> {record['after']['accuracy']:.3f}, teacher "
            f"{record['teacher_exact_match']:.3f}; gap closed {record['gap_closed']:+.2f} "
            f"({record['before']['total']} held-out problems)",
            f"  loss {first['loss']:.3f} (first step) -> {last['loss']:.3f} (last); reverse KL to the teacher on the "
            f"step's sequences, last step: {last['reverse_kl_per_sequence']:.3f} per sequence, "
            f"{last['reverse_kl_per_token']:.3f} per token",
            f"  regression check: {record['retained']['still_correct_after']} of the {record['retained']['correct_before']} "
            f"held-out problems answered correctly before still are after"]


def distill_effects(records: Sequence[Mapping]) -> dict | None:
    """This run's exact-match changes (one seed): each kind's after - before, and on_policy - fixed and
    on_policy - shuffled_teacher after training; None unless every kind is ok."""
    by_kind = {record.get("kind"): record for record in records if record.get("status") == "ok"}
    if set(by_kind) != set(DISTILL_KINDS):
        return None
    before = by_kind["on_policy"]["before"]["accuracy"]
    after = {kind: by_kind[kind]["after"]["accuracy"] for kind in DISTILL_KINDS}
    return {"seed": by_kind["on_policy"]["settings"]["seed"], "before": before, "after": after,
            "teacher": by_kind["on_policy"]["teacher_exact_match"]}


def distill_effect_sentences(records: Sequence[Mapping]) -> list[str]:
    """The page's sentences about this run: each recipe against the baseline row and the control."""
    effects = distill_effects(records)
    if effects is None:
        return [lesson_text.text("distill_opd.effect_missing")]
    after = effects["after"]
    return [lesson_text.text("distill_opd.effect_one_seed", seed=effects["seed"], before=effects["before"],
                             teacher=effects["teacher"], on_policy=after["on_policy"], fixed=after["fixed"],
                             control=after["shuffled_teacher"], on_policy_rise=after["on_policy"] - effects["before"],
                             fixed_rise=after["fixed"] - effects["before"],
                             recipes=after["on_policy"] - after["fixed"])]


def draw_distillation(records: Sequence[Mapping]):
    """Figure: the loss per step of each kind, and the student's held-out exact match before and after each
    kind beside the teacher's."""
    import matplotlib.pyplot as plt

    shown = [record for record in records if record.get("status") == "ok"]
    fig, (loss_ax, match_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    for record in shown:
        loss_ax.plot([step["step"] for step in record["steps"]], [step["reverse_kl_per_sequence"] for step in record["steps"]],
                     marker="o", label=f"{record['kind']}")
    loss_ax.set(xlabel="distillation step", ylabel="reverse KL to the teacher (nats / token, per sequence)",
                title="How far the student is from the teacher on the step's sequences")
    loss_ax.set_yscale("log")
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(fontsize=8)
    positions = range(len(shown))
    match_ax.bar([p - 0.2 for p in positions], [r["before"]["accuracy"] for r in shown], width=0.4, label="student before")
    match_ax.bar([p + 0.2 for p in positions], [r["after"]["accuracy"] for r in shown], width=0.4, label="student after")
    if shown:
        match_ax.axhline(shown[0]["teacher_exact_match"], color="black", linestyle="--", label="teacher")
    match_ax.set_xticks(list(positions), [record["kind"] for record in shown])
    match_ax.set_ylim(0, 1.05)
    match_ax.set(ylabel="held-out exact match (greedy)", title="Student before and after, per kind")
    match_ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig
