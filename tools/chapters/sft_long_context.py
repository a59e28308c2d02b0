"""Chapter 30 (long-context fine-tuning: padding vs packing): what the notebook runs around its exercises.

The learner writes `pack_examples`, `block_causal_mask` and `waste_report`; nothing here implements
them. This module holds the rest: a one-layer attention model small enough for a graded test (it
takes a 4-D mask, so the boundary rule can be checked by a loss), the conversion between the stage's
examples and the exercises' dicts, and Step 5's reading of the shared SFT stage's records. The
decision takes the learner's `waste_report` as an argument, so the notebook passes its own.
Nothing here prints.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Callable, Mapping

import torch
import torch.nn.functional as F

from tools.errors import ConfigError

CHAPTER_ID = "30"
DECISION_STAGE = "decision"
LOSS_CURVE_TOLERANCE = 1e-4
"""Largest relative difference allowed between a packed variant's step losses and its padded twin's."""


class ToyAttentionLM(torch.nn.Module):
    """One attention layer with learned token and position embeddings, called like a transformers
    model: `model(input_ids=..., position_ids=..., attention_mask=...)` returns `.logits`. The mask
    is None (causal inside the whole row) or bool [batch, 1, time, time], True where a query may
    attend a key."""

    def __init__(self, seed: int = 0, vocab: int = 17, width: int = 8, max_positions: int = 64, dtype=torch.float64):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)

        def weight(*shape, scale=1.0):
            return torch.nn.Parameter(torch.randn(*shape, generator=generator, dtype=dtype) * scale)

        self.tokens = weight(vocab, width)
        self.positions = weight(max_positions, width)
        self.query, self.key, self.value = (weight(width, width, scale=1 / math.sqrt(width)) for _ in range(3))
        self.head = weight(width, vocab, scale=1 / math.sqrt(width))

    def forward(self, input_ids, position_ids=None, attention_mask=None, **unused):
        time = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(time).expand_as(input_ids)
        hidden = self.tokens[input_ids] + self.positions[position_ids]
        scores = (hidden @ self.query) @ (hidden @ self.key).transpose(1, 2) / math.sqrt(hidden.shape[-1])
        allowed = torch.ones(time, time, dtype=torch.bool).tril().expand(input_ids.shape[0], time, time)
        if attention_mask is not None:
            allowed = attention_mask[:, 0]
        scores = scores.masked_fill(~allowed, float("-inf"))
        mixed = torch.softmax(scores, dim=-1) @ (hidden @ self.value)
        return SimpleNamespace(logits=torch.tanh(hidden + mixed) @ self.head)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token loss over the supervised positions (labels are not shifted; -100 ignored)."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                           ignore_index=-100, reduction="sum")


def as_tensors(packed: Mapping) -> dict:
    """The list-of-rows result of `pack_examples` as long tensors [rows, row_length]."""
    return {key: torch.tensor(packed[key], dtype=torch.long)
            for key in ("input_ids", "labels", "position_ids", "attention_mask")}


def example_dicts(examples) -> list[dict]:
    """The SFT stage's examples as the exercises' dicts (`input_ids`, `labels` lists)."""
    return [{"input_ids": list(example.input_ids), "labels": list(example.labels)} for example in examples]


def timed_steps(record: Mapping, warmup_steps: int | None = None) -> dict:
    """The steps of a variant record that count for throughput: the first `warmup_steps` (the plan's
    WARMUP_STEPS, recorded by its `measure`) are left out. Returns per timed step the real tokens,
    the token slots and the seconds (seconds None when the record has no step times)."""
    measured = record["measurements"]
    if warmup_steps is None:
        warmup_steps = int((record.get("chapter_measurements") or {}).get("warmup_steps", 0))
    real = list(measured["real_tokens_per_step"][warmup_steps:])
    slots = list(measured["token_slots_per_step"][warmup_steps:])
    times = measured.get("step_time_ms")
    seconds = None if times is None else [value / 1000.0 for value in times[warmup_steps:]]
    if not real:
        raise ConfigError(f"variant {record['variant']['name']}: no step left after {warmup_steps} warm-up steps")
    return {"warmup_steps": warmup_steps, "real_tokens": real, "token_slots": slots, "seconds": seconds}


def waste_runs(records: list[Mapping]) -> list[dict]:
    """The input of `waste_report` read from the chapter-30 variant records that ended ok: the timed
    steps only (warm-up left out), their real tokens, token slots and wall seconds (None if not measured)."""
    runs = []
    for record in records:
        if record.get("status") != "ok" or record["variant"]["batching"] not in ("padded", "packed"):
            continue
        steps = timed_steps(record)
        runs.append({"strategy": record["variant"]["batching"], "max_length": record["variant"]["max_length"],
                     "real_tokens": sum(steps["real_tokens"]), "token_slots": sum(steps["token_slots"]),
                     "seconds": None if steps["seconds"] is None else sum(steps["seconds"])})
    return runs


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def step_throughput(record: Mapping) -> dict | None:
    """Real tokens per second of every timed step, with their median, min and max; None when the
    record has no step times (a throughput not measured is not a number)."""
    steps = timed_steps(record)
    if steps["seconds"] is None:
        return None
    rates = [real / seconds for real, seconds in zip(steps["real_tokens"], steps["seconds"])]
    return {"steps": len(rates), "warmup_steps": steps["warmup_steps"], "rates": rates,
            "median": _median(rates), "min": min(rates), "max": max(rates)}


def length_effects(records: list[Mapping]) -> dict[int, dict]:
    """Per row length with both variants ok: what packing changed. Deterministic: the real tokens
    (must be equal), token slots, padding share and rows of each, the largest relative difference of
    the step losses, the held-out loss after training packed minus padded (and how much training moved
    it, for scale). Measured: each variant's step throughput (median, min, max) and the gain, the
    ratio of the medians, with `separated` True only when every timed packed step was faster than
    every timed padded step (the gain is then not noise of the timing)."""
    by_key = {(r["variant"]["batching"], r["variant"]["max_length"]): r for r in records if r.get("status") == "ok"}
    effects = {}
    for length in sorted({length for _, length in by_key}):
        padded, packed = by_key.get(("padded", length)), by_key.get(("packed", length))
        if padded is None or packed is None:
            continue
        item = {"loss_curve_diff": max(_relative(a, b) for a, b in zip(packed["measurements"]["losses"],
                                                                           padded["measurements"]["losses"])),
                "heldout_loss_after_diff": (packed["measurements"]["eval_loss_after"]
                                            - padded["measurements"]["eval_loss_after"]),
                "heldout_loss_training_change": (padded["measurements"]["eval_loss_after"]
                                                 - padded["measurements"]["eval_loss_before"])}
        for name, record in (("padded", padded), ("packed", packed)):
            measured = record["measurements"]
            slots = measured["token_slots"]
            item[name] = {"real_tokens": measured["real_tokens"], "token_slots": slots,
                          "padding_share": (slots - measured["real_tokens"]) / slots,
                          "rows_per_step": measured["token_slots_per_step"][0] // length,
                          "throughput": step_throughput(record)}
        fast, slow = item["packed"]["throughput"], item["padded"]["throughput"]
        measured_both = fast is not None and slow is not None
        item["gain"] = fast["median"] / slow["median"] if measured_both else None
        item["separated"] = measured_both and fast["min"] > slow["max"]
        effects[length] = item
    return effects


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def isolation_findings(records: list[Mapping]) -> dict:
    """Per packed variant: the record's isolation proof, and its step losses against its padded twin's."""
    by_key = {(r["variant"]["batching"], r["variant"]["max_length"]): r for r in records if r.get("status") == "ok"}
    findings = {}
    for (batching, length), record in sorted(by_key.items(), key=lambda item: (item[0][1], item[0][0])):
        if batching != "packed":
            continue
        proof = record["chapter_measurements"]["isolation"]
        twin = by_key.get(("padded", length))
        curve = None if twin is None else max(_relative(a, b) for a, b in zip(record["measurements"]["losses"],
                                                                                twin["measurements"]["losses"]))
        findings[record["variant"]["name"]] = {
            "max_length": length, "isolated": bool(proof["isolated"]),
            "relative_loss_diff": proof["relative_loss_diff"], "max_abs_logit_diff": proof["max_abs_logit_diff"],
            "without_block_mask_logit_diff": proof["without_block_mask"]["max_abs_logit_diff"],
            "loss_curve_vs_padded": curve,
            "curve_matches": curve is not None and curve <= LOSS_CURVE_TOLERANCE}
    return findings


def control_findings(records: list[Mapping]) -> dict:
    """Per negative control (packed rows without the block mask): its step losses against its padded
    twin's, and whether that difference is caught (beyond LOSS_CURVE_TOLERANCE): the check can fail."""
    by_key = {(r["variant"]["batching"], r["variant"]["max_length"]): r for r in records if r.get("status") == "ok"}
    findings = {}
    for (batching, length), record in sorted(by_key.items(), key=lambda item: item[0][1]):
        twin = by_key.get(("padded", length))
        if batching != "packed_unisolated" or twin is None:
            continue
        curve = max(_relative(a, b) for a, b in zip(record["measurements"]["losses"], twin["measurements"]["losses"]))
        findings[record["variant"]["name"]] = {"max_length": length, "loss_curve_vs_padded": curve,
                                               "heldout_loss_after_diff": (record["measurements"]["eval_loss_after"]
                                                                           - twin["measurements"]["eval_loss_after"]),
                                               "caught": curve > LOSS_CURVE_TOLERANCE}
    return findings


def decide(records: list[Mapping], waste_report: Callable) -> dict:
    """accept_mechanism / tune / reject for the stage, from its records.

    reject: a variant failed, a packed variant is not isolated (its proof fails, or its step losses
    leave its padded twin's), or the negative control (packed without the block mask) is not caught
    (its step losses match its padded twin's: the check could not have failed); tune: everything
    isolated but a variant ran out of memory (that length needs a smaller batch or row);
    accept_mechanism: otherwise. The waste report (the learner's function) is returned beside it; it
    informs, it does not decide."""
    if not records:
        raise ConfigError("no record to decide from")
    statuses = {record["variant"]["name"]: record.get("status") for record in records}
    findings = isolation_findings(records)
    reasons = [f"{name}: status {status}" for name, status in statuses.items() if status not in ("ok", "oom")]
    reasons += [f"{name}: not isolated" for name, item in findings.items()
                if not (item["isolated"] and item["curve_matches"])]
    if not findings:
        reasons.append("no packed variant ended ok")
    controls = control_findings(records)
    reasons += [f"{name}: the control is not caught" for name, item in controls.items() if not item["caught"]]
    oom = [name for name, status in statuses.items() if status == "oom"]
    if reasons:
        decision = "reject"
    elif oom:
        decision, reasons = "tune", [f"{name}: out of memory" for name in oom]
    else:
        decision = "accept_mechanism"
    return {"decision": decision, "reasons": reasons, "isolation": findings, "controls": controls,
            "waste": waste_report(waste_runs(records)), "effects": length_effects(records)}


def waste_lines(report: Mapping) -> list[str]:
    """The waste report as a table, one line per strategy and length."""
    def rate(value):
        return "not measured" if value is None else f"{value:,.0f}"

    lines = [f"{'length':>7} {'strategy':<9}{'real':>7}{'slots':>8}{'padding':>9}{'real tok/s':>13}{'slot tok/s':>13}"]
    for row in report["rows"]:
        lines.append(f"{row['max_length']:>7} {row['strategy']:<9}{row['real_tokens']:>7}{row['token_slots']:>8}"
                     f"{row['padding_share']:>9.1%}{rate(row['effective_tokens_per_s']):>13}"
                     f"{rate(row['slot_tokens_per_s']):>13}")
    gains = ", ".join(f"{length}: {'-' if gain is None else f'{gain:.2f}x'}" for length, gain in report["packing_gain"].items())
    lines.append(f"packing gain in real tokens per second (packed / padded) by length: {gains}")
    return lines
