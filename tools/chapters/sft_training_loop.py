"""Chapter 15 (effective SFT update and the training loop): what the notebook runs around its exercises.

The learner writes `accumulate_gradients`, `effective_update_check` and `isolated_evaluation`;
nothing here implements them. This module holds the rest: a causal toy model small enough for a
graded test (with switchable side effects, so an evaluation that touches training state can be
caught), batch builders, and Step 5's reading of the shared SFT stage's records. `decide_variants`
takes the learner's `effective_update_check` as an argument, so the notebook passes its own.
Nothing here prints.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Callable, Mapping

import torch

from tools.errors import ConfigError

CHAPTER_ID = "15"
DECISION_STAGE = "decision"
CONTROL_VARIANT = "effective"
MIN_LOSS_DECREASE = 1e-3
"""The smallest drop of the same batch's loss that counts as an update (Step 5's setting)."""
DECISIONS = ("accept_mechanism", "tune", "reject")


class ToyCausalLM(torch.nn.Module):
    """A causal language model in a few lines: position t sees the running mean of the embeddings up
    to t. Called like a transformers model, `model(input_ids=..., attention_mask=...)`, it returns an
    object with `.logits` [batch, time, vocab].

    Options that give its forward pass side effects a correct evaluation must notice:
    `dropout` (active in training mode only), `running_stat` (a buffer updated in training mode,
    like BatchNorm's statistics), `count_calls` (a buffer incremented by every call, in any mode),
    `count_modes` (a buffer `modes` [2, 2] that counts the calls per training mode and grad mode:
    `modes[int(training), int(grad_enabled)]`) and `on_forward` (a callable object run at every call,
    e.g. `SchedulerInForward`). The counters are buffers, so they are part of the model's state."""

    def __init__(self, seed: int = 0, vocab: int = 13, width: int = 6, dtype=torch.float64, dropout: float = 0.0,
                 running_stat: bool = False, count_calls: bool = False, count_modes: bool = False,
                 on_forward=None):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(vocab, width, generator=generator, dtype=dtype))
        self.mix = torch.nn.Parameter(torch.randn(width, width, generator=generator, dtype=dtype) / math.sqrt(width))
        self.head = torch.nn.Parameter(torch.randn(width, vocab, generator=generator, dtype=dtype) / math.sqrt(width))
        self.dropout = torch.nn.Dropout(dropout)
        self.running_stat = running_stat
        self.register_buffer("stat", torch.zeros(width, dtype=dtype))
        if count_calls:
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        if count_modes:
            self.register_buffer("modes", torch.zeros(2, 2, dtype=torch.long))
        self.on_forward = on_forward

    def forward(self, input_ids, attention_mask=None, **unused):
        hidden = self.dropout(self.embed[input_ids])
        steps = torch.arange(1, input_ids.shape[1] + 1, dtype=hidden.dtype).view(1, -1, 1)
        context = hidden.cumsum(dim=1) / steps
        if self.training and self.running_stat:
            with torch.no_grad():
                self.stat.mul_(0.9).add_(0.1 * hidden.detach().mean(dim=(0, 1)))
        if hasattr(self, "calls"):
            self.calls += 1
        if hasattr(self, "modes"):
            self.modes[int(self.training), int(torch.is_grad_enabled())] += 1
        if self.on_forward is not None:
            self.on_forward()
        return SimpleNamespace(logits=torch.tanh(hidden + context @ self.mix + self.stat) @ self.head)


class SchedulerInForward:
    """A learning-rate scheduler stepped inside the forward pass (halves every group's rate): the
    bug of a training-loop callback that also fires during evaluation."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __call__(self):
        for group in self.optimizer.param_groups:
            group["lr"] = group["lr"] * 0.5


class OptimizerStepInForward:
    """An optimizer step taken inside the forward pass: the bug of a callback that updates the weights
    (and the optimizer's moments) during evaluation."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __call__(self):
        self.optimizer.step()


def make_batch(rows: list[list[int]], supervised_from: list[int], pad_id: int = 0) -> dict:
    """Right-padded `input_ids`, `attention_mask`, `labels` from token lists; row r is supervised from
    position `supervised_from[r]` on (labels -100 before it and on padding)."""
    if len(rows) != len(supervised_from) or not rows:
        raise ConfigError("need one supervised_from per row, and at least one row")
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, (row, start) in enumerate(zip(rows, supervised_from)):
        ids[index, :len(row)] = torch.tensor(row)
        mask[index, :len(row)] = 1
        labels[index, start:len(row)] = torch.tensor(row[start:], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def concat_batches(batches: list[dict], pad_id: int = 0) -> dict:
    """The micro-batches stacked into one large batch (right-padded to the widest)."""
    width = max(batch["input_ids"].shape[1] for batch in batches)
    fills = {"input_ids": pad_id, "attention_mask": 0, "labels": -100}
    return {key: torch.cat([torch.nn.functional.pad(batch[key], (0, width - batch[key].shape[1]), value=fill)
                            for batch in batches]) for key, fill in fills.items()}


def observation(record: Mapping) -> dict:
    """The input of `effective_update_check` read from a chapter-15 variant record of the SFT stage."""
    measurements, own = record["measurements"], record["chapter_measurements"]
    return {"sha256_before": record["hashes"]["adapter_sha256_before"],
            "sha256_after": record["hashes"]["adapter_sha256_after"],
            "grad_norms": list(measurements["grad_norms"]),
            "loss_before": own["same_batch"]["loss_before"], "loss_after": own["same_batch"]["loss_after"],
            "planned_lr": list(own["planned_learning_rates"]), "applied_lr": list(measurements["learning_rates"])}


def isolation_report(record: Mapping) -> dict | None:
    """What the chapter's `isolated_evaluation` reported on the stage's last evaluation (after
    training, with the training optimiser and the trained examples), or None when it did not run."""
    return ((record.get("measurements") or {}).get("evaluations") or {}).get("after")


def isolation_findings(record: Mapping) -> list[str]:
    """Why a variant's evaluation was not isolated (empty when it was): what the chapter's
    `isolated_evaluation` reported inside the stage (its state, its optimiser, its leaked hashes), or,
    in a record from before the stage ran it, the stage's own audit."""
    report = isolation_report(record)
    if report is not None:
        checks = {"state_unchanged": "evaluation_changed_state", "optimizer_unchanged": "evaluation_changed_optimizer"}
        findings = [finding for name, finding in checks.items() if report.get(name) is not True]
        return findings + (["validation_examples_trained"] if report.get("leaked") else [])
    side, audit = record["chapter_measurements"]["evaluation_side_effects"], record["chapter_measurements"]["split_audit"]
    checks = {"parameters_unchanged": "evaluation_changed_parameters",
              "gradients_unchanged": "evaluation_changed_gradients",
              "training_mode_restored": "evaluation_left_mode_changed"}
    findings = [finding for name, finding in checks.items() if side[name] is not True]
    if audit["leaked_count"]:
        findings.append("validation_examples_trained")
    return findings


def audit_disagreements(record: Mapping) -> list[str]:
    """Where the chapter's `isolated_evaluation` and the stage's own audit of the same run disagree:
    the leaked examples, and whether the evaluation changed the parameters."""
    report = isolation_report(record)
    own = (record.get("chapter_measurements") or {})
    if report is None or "split_audit" not in own:
        return []
    found = []
    if len(report.get("leaked") or []) != own["split_audit"]["leaked_count"]:
        found.append(f"leaked examples: yours {len(report.get('leaked') or [])}, the stage's audit "
                     f"{own['split_audit']['leaked_count']}")
    side = own.get("evaluation_side_effects") or {}
    if side and bool(report.get("state_unchanged")) != bool(side.get("parameters_unchanged")):
        found.append(f"state unchanged: yours {report.get('state_unchanged')}, the stage's audit "
                     f"{side.get('parameters_unchanged')}")
    return found


def decide_variant(record: Mapping, effective_update_check: Callable, min_loss_decrease: float = MIN_LOSS_DECREASE) -> dict:
    """accept_mechanism / tune / reject for one variant, from its record.

    reject: the run did not end ok, the update check failed, or evaluation was not isolated;
    tune: a real, isolated update whose held-apart loss did not go down;
    accept_mechanism: otherwise."""
    name = record["variant"]["name"]
    if record.get("status") != "ok":
        return {"variant": name, "decision": "reject", "reasons": [f"status_{record.get('status')}"], "update": None}
    update = effective_update_check(observation(record), min_loss_decrease=min_loss_decrease)
    reasons = list(update["failures"]) + isolation_findings(record)
    measured = record["measurements"]
    if reasons:
        decision = "reject"
    elif not measured["eval_loss_after"] < measured["eval_loss_before"]:
        decision, reasons = "tune", ["held_apart_loss_not_lower"]
    else:
        decision = "accept_mechanism"
    return {"variant": name, "decision": decision, "reasons": reasons, "update": update}


def chapter_decision(decisions: list[dict], control: str = CONTROL_VARIANT) -> dict:
    """The stage's verdict: the checks work when the real update is accepted and every look-alike is
    rejected. A look-alike that passes means the checks cannot tell them apart: reject."""
    by_name = {item["variant"]: item for item in decisions}
    if control not in by_name:
        raise ConfigError(f"the control variant {control!r} has no record")
    passed_lookalikes = sorted(name for name, item in by_name.items() if name != control and item["decision"] != "reject")
    if passed_lookalikes:
        return {"decision": "reject", "reason": f"look-alike update(s) not caught: {passed_lookalikes}"}
    control_decision = by_name[control]["decision"]
    if control_decision == "accept_mechanism":
        return {"decision": "accept_mechanism", "reason": "the real update passes, every look-alike is rejected"}
    return {"decision": control_decision, "reason": f"the real update is {control_decision}: {by_name[control]['reasons']}"}


def decide_stage(records: list[Mapping], mechanism=None) -> dict:
    """Every variant's decision and the stage's, with the chapter's `effective_update_check` taken from
    `mechanism` (a tools.experiments.contract.Mechanism: the learner's, else the package's copy), and
    which functions decided (`mechanism`: source and code sha256 per function)."""
    from tools.experiments.contract import Mechanism
    from tools.experiments.sft_training.effective_update import effective_update_check as package_check
    from tools.experiments.sft_training.plans.ch_15 import only

    mechanism = mechanism if mechanism is not None else Mechanism()
    check = mechanism.function("effective_update_check", package_check)
    decisions = [decide_variant(record, check) for record in records]
    return {"variants": decisions, "decision": chapter_decision(decisions),
            "variant_lines": variant_lines(records, decisions),
            "mechanism": only(mechanism, "effective_update_check").describe({"effective_update_check": package_check}),
            "audit_disagreements": {record["variant"]["name"]: audit_disagreements(record) for record in records
                                    if audit_disagreements(record)}}


def variant_lines(records: list[Mapping], decisions: list[dict]) -> list[str]:
    """One line per variant: loss on the same batch, gradient norms, held-apart loss, leak, decision."""
    lines = [f"{'variant':<16}{'same-batch loss':>22}{'grad norm (max)':>17}{'eval loss':>20}{'leaked':>8}  decision"]
    for record, decision in zip(records, decisions):
        if record.get("status") != "ok":
            lines.append(f"{record['variant']['name']:<16}status {record.get('status')}: {record.get('error')}")
            continue
        same = record["chapter_measurements"]["same_batch"]
        measured = record["measurements"]
        report = isolation_report(record)
        leaked = (len(report.get("leaked") or []) if report is not None
                  else record["chapter_measurements"]["split_audit"]["leaked_count"])
        lines.append(f"{record['variant']['name']:<16}{same['loss_before']:>10.5f} -> {same['loss_after']:<9.5f}"
                     f"{max(measured['grad_norms']):>17.3g}{measured['eval_loss_before']:>9.4f} -> "
                     f"{measured['eval_loss_after']:<7.4f}{leaked:>8}  {decision['decision']}"
                     + (f" ({', '.join(decision['reasons'])})" if decision["reasons"] else ""))
    return lines


def mean_token_loss(model, batch: Mapping) -> float:
    """Mean next-token loss of one batch over its supervised positions (eval mode, no gradients;
    the model's mode is restored). The measuring stick of Steps 1-3, not an exercise."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.double()
            targets = batch["labels"][:, 1:]
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                     ignore_index=-100, reduction="sum")
    finally:
        model.train(was_training)
    return float(loss) / int((targets != -100).sum())


def fingerprint(model) -> str:
    """sha256 over the names and bytes of every trainable tensor: equal fingerprints, unchanged tensors."""
    import hashlib

    digest = hashlib.sha256()
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            digest.update(name.encode("utf-8"))
            digest.update(parameter.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def peak_comparable(records: list[Mapping]) -> dict:
    """`{"peak_allocated_gib": the highest peak over the variants}` when one was measured (CUDA), else {}."""
    peaks = [record.get("comparable", {}).get("peak_allocated_gib") for record in records]
    peaks = [peak for peak in peaks if isinstance(peak, (int, float)) and not isinstance(peak, bool)]
    return {"peak_allocated_gib": max(peaks)} if peaks else {}


def trainer_num_items(micro_batches: list[Mapping]) -> int:
    """The `num_items_in_batch` transformers' own `Trainer._get_num_items_in_batch` computes for these
    micro-batches on one process (the method itself, on a minimal stand-in for the Trainer). In
    transformers 5.9 it is `labels.ne(-100)` summed over the window, counted **before** the shift."""
    from transformers import Trainer

    method = getattr(Trainer, "_get_num_items_in_batch", None)
    if method is None:
        raise ConfigError("this transformers has no Trainer._get_num_items_in_batch to ask")
    stand_in = SimpleNamespace(model_accepts_loss_kwargs=True, compute_loss_func=None, accelerator=SimpleNamespace(),
                               args=SimpleNamespace(average_tokens_across_devices=False, world_size=1, n_gpu=1))
    counted = method(stand_in, list(micro_batches), torch.device("cpu"))
    return int(counted)


def shifted_num_items(micro_batches: list[Mapping]) -> int:
    """The supervised positions the loss really averages over: `labels[:, 1:] != -100`, summed."""
    return sum(int((batch["labels"][:, 1:] != -100).sum()) for batch in micro_batches)
