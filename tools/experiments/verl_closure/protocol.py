"""The group protocol of the shared experiment, the same for every backend.

`run_group` drives one group's session (torch or verl) through the controlled step and returns its
raw measurements on the absolute monotonic clock. This module also holds the request and rollout
identities, the rollout hashes, the finish-reason rule and the admission rule.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from tools.data.arithmetic import ArithmeticTask, TaskPool, prompt_sha256, score_response, task_sha256
from tools.experiments.verl_closure.comparisons import (behaviour_drift, changed_tensor_names, logprob_agreement,
                                                        masked_abs_errors, state_digests)

GROUPS = ("release", "retain")
FREE_CACHE_ENGINE = {"release": True, "retain": False}
PHASES = ("initialisation", "initial_release", "initial_sync", "generation", "engine_release",
          "score_before_update", "update", "score_after_update", "weight_sync", "post_sync_generation",
          "post_sync_scoring")
RELEASE_ONLY_PHASES = ("initial_release", "engine_release")
INITIALISATION_PHASE = "initialisation"
FINISH_REASONS = ("stop", "length", "unknown")


def expected_phases(group: str) -> list[str]:
    """The phases a group records, in order (release-only phases only with free_cache_engine)."""
    return [name for name in PHASES if FREE_CACHE_ENGINE[group] or name not in RELEASE_ONLY_PHASES]


@dataclass(frozen=True)
class Request:
    """One sampling request: a task's prompt token ids and the sample's index."""

    rollout_id: str
    task_id: str
    sample_index: int
    seed: int
    prompt_token_ids: tuple[int, ...]
    prompt_sha256: str
    task_sha256: str


@dataclass(frozen=True)
class SupervisedExample:
    """One supervised item: prompt tokens and the tokens of the correct answer (plus end-of-turn)."""

    task_id: str
    prompt_token_ids: tuple[int, ...]
    target_token_ids: tuple[int, ...]


class GroupSession(Protocol):
    """What a backend provides for one group; `run_group` drives it.

    `generate` returns one dict per request: `response_token_ids`, `behaviour_logprobs`,
    `finish_reason`, `response_text`, `seed` and `engine_version` (the policy version the engine
    itself reports for that output, or None when it reports none). `lora_state` returns the
    trainer's LoRA tensors as float32 numpy arrays by normalised name.
    """

    group: str
    events: list[dict]

    def initialise(self) -> None: ...
    def release_engine(self) -> None: ...
    def weight_sync(self, version: int) -> None: ...
    def generate(self, requests: Sequence[Request]) -> list[dict]: ...
    def trainer_logprobs(self, rollouts: Sequence[Mapping[str, Any]]) -> list[list[float]]: ...
    def supervised_update(self, examples: Sequence[SupervisedExample]) -> dict: ...
    def lora_state(self) -> dict: ...
    def trainer_version(self) -> int: ...
    def engine_version(self) -> int | None: ...
    def close(self) -> None: ...


def canonical_sha256(value: Any) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lora_state_sha256(digests: Mapping[str, Mapping[str, Any]]) -> str:
    """One hash over the per-tensor digests (name, dtype, shape, sha256), order-independent."""
    return canonical_sha256({name: dict(digests[name]) for name in sorted(digests)})


def rollout_identity(rollout: Mapping[str, Any]) -> dict:
    """The fields that define a frozen rollout (what its hash covers)."""
    keys = ("rollout_id", "task_id", "sample_index", "seed", "prompt_sha256", "task_sha256", "prompt_token_ids",
            "response_token_ids", "behaviour_logprobs", "action_mask", "policy_version")
    return {key: rollout.get(key) for key in keys}


def rollouts_sha256(rollouts: Iterable[Mapping[str, Any]]) -> str:
    return canonical_sha256([rollout_identity(r) for r in rollouts])


def finish_reason(tokens: Sequence[int], eos_ids: Iterable[int], response_token_cap: int) -> str:
    """"stop" when the last token is any end-of-sequence id (the tokenizer's and every one in the
    generation config), else "length" when the response reached the cap, else "unknown"."""
    if tokens and int(tokens[-1]) in {int(t) for t in eos_ids}:
        return "stop"
    return "length" if len(tokens) >= response_token_cap else "unknown"


def admission(frozen: Sequence[Mapping[str, Any]], rescored: Sequence[Sequence[float]], threshold: float,
              trainer_version: int) -> dict:
    """Admit each frozen rollout whose behaviour drift under the updated policy is within `threshold`."""
    decisions = []
    for rollout, current in zip(frozen, rescored, strict=True):
        drift = behaviour_drift(rollout["behaviour_logprobs"], current, rollout["action_mask"])
        admitted = drift <= threshold
        decisions.append({"rollout_id": rollout["rollout_id"], "policy_version": rollout["policy_version"],
                          "scored_version": trainer_version,
                          "version_lag": trainer_version - int(rollout["policy_version"]),
                          "behaviour_drift": drift, "state": "admitted" if admitted else "rejected"})
    admitted_count = sum(d["state"] == "admitted" for d in decisions)
    return {"metric": "mean |log pi_updated - log pi_behaviour| over action tokens", "threshold": threshold,
            "admitted": admitted_count, "rejected": len(decisions) - admitted_count, "decisions": decisions}


@contextlib.contextmanager
def _phase(record: list[dict], name: str, clock: Callable[[], float], log: Callable[[str], None]):
    start = clock()
    log(f"phase {name}: start")
    yield
    end = clock()
    record.append({"name": name, "start": start, "end": end})
    log(f"phase {name}: done in {end - start:.3f} s")


def build_requests(pool: TaskPool, tokenize_prompt: Callable[[str], list[int]], samples_per_task: int,
                   seed: int, *, tag: str = "s") -> list[Request]:
    """The fixed request list: every task `samples_per_task` times, task order then sample order.

    Each request carries its own seed (`seed + position`) for engines that seed per request; its id
    is `<task_id>#<tag><sample>`.
    """
    requests = []
    for task_index, task in enumerate(pool.tasks):
        ids = tuple(int(t) for t in tokenize_prompt(task.prompt))
        for sample in range(samples_per_task):
            requests.append(Request(rollout_id=f"{task.task_id}#{tag}{sample}", task_id=task.task_id,
                                    sample_index=sample, seed=seed + task_index * samples_per_task + sample,
                                    prompt_token_ids=ids, prompt_sha256=prompt_sha256(task.prompt),
                                    task_sha256=task_sha256(task)))
    return requests


def build_examples(pool: TaskPool, tokenize_prompt: Callable[[str], list[int]],
                   tokenize_answer: Callable[[str], list[int]]) -> list[SupervisedExample]:
    """One supervised item per task: the prompt and the integer label as the assistant's answer."""
    return [SupervisedExample(task_id=task.task_id,
                              prompt_token_ids=tuple(int(t) for t in tokenize_prompt(task.prompt)),
                              target_token_ids=tuple(int(t) for t in tokenize_answer(str(task.label))))
            for task in pool.tasks]


def annotate_rollouts(samples: Sequence[Mapping[str, Any]], requests: Sequence[Request],
                      tasks: Mapping[str, ArithmeticTask], version: int | None) -> list[dict]:
    """Join engine samples with their requests: identity, hashes, policy versions, parse and score.

    `policy_version` is the version the driver synced into the engine; `engine_reported_version`
    is what the engine says it served (None when it says nothing).
    """
    if len(samples) != len(requests):
        raise RuntimeError(f"engine returned {len(samples)} samples for {len(requests)} requests")
    rollouts = []
    for request, sample in zip(requests, samples):
        response = [int(t) for t in sample["response_token_ids"]]
        logprobs = [float(v) for v in sample["behaviour_logprobs"]]
        if len(logprobs) != len(response):
            raise RuntimeError(f"{request.rollout_id}: {len(logprobs)} log-probs for {len(response)} tokens")
        if not all(math.isfinite(v) for v in logprobs):
            raise RuntimeError(f"{request.rollout_id}: non-finite behaviour log-prob")
        scored = score_response(tasks[request.task_id], sample.get("response_text"))
        reported = sample.get("engine_version")
        rollouts.append({
            "rollout_id": request.rollout_id, "task_id": request.task_id, "sample_index": request.sample_index,
            "seed": sample.get("seed", request.seed), "prompt_sha256": request.prompt_sha256,
            "task_sha256": request.task_sha256, "prompt_token_ids": list(request.prompt_token_ids),
            "response_token_ids": response, "behaviour_logprobs": logprobs, "action_mask": [1] * len(response),
            "policy_version": version, "engine_reported_version": None if reported is None else int(reported),
            "finish_reason": sample.get("finish_reason"), "response_text": sample.get("response_text"),
            "parsed": scored["parsed"], "correct": scored["correct"],
        })
    return rollouts


def _reported_versions(rollouts: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """The distinct engine-reported versions of some rollouts (None sorts first)."""
    return sorted({r["engine_reported_version"] for r in rollouts}, key=lambda v: (v is not None, v or 0))


def run_group(session: GroupSession, *, group: str, requests: Sequence[Request],
              probe_requests: Sequence[Request], examples: Sequence[SupervisedExample],
              tasks: Mapping[str, ArithmeticTask], frozen: Sequence[Mapping[str, Any]] | None,
              drift_threshold: float, clock: Callable[[], float], log: Callable[[str], None]) -> dict:
    """Drive one group through the controlled step; return its measurements (absolute clock times).

    `frozen` is None for the release group: its generation becomes the frozen rollouts. The result
    holds the LoRA tensors under `lora_tensors` (numpy arrays, not JSON): the runner compares the
    groups' updates with them and keeps only the comparison.
    """
    phases: list[dict] = []
    release = FREE_CACHE_ENGINE[group]
    with _phase(phases, "initialisation", clock, log):
        session.initialise()
    initial_state = session.lora_state()
    initial = state_digests(initial_state)
    if release:
        with _phase(phases, "initial_release", clock, log):
            session.release_engine()
    with _phase(phases, "initial_sync", clock, log):
        session.weight_sync(session.trainer_version())
    generation_version = session.engine_version()
    with _phase(phases, "generation", clock, log):
        samples = session.generate(requests)
    generated = annotate_rollouts(samples, requests, tasks, generation_version)
    frozen_set = [dict(r) for r in (generated if frozen is None else frozen)]
    if release:
        with _phase(phases, "engine_release", clock, log):
            session.release_engine()
    with _phase(phases, "score_before_update", clock, log):
        before = session.trainer_logprobs(frozen_set)
    masks = [r["action_mask"] for r in frozen_set]
    before_agreement = logprob_agreement([r["behaviour_logprobs"] for r in frozen_set], before, masks)
    version_before = session.trainer_version()
    with _phase(phases, "update", clock, log):
        update = session.supervised_update(examples)
    updated_state = session.lora_state()
    updated = state_digests(updated_state)
    version_after = session.trainer_version()
    with _phase(phases, "score_after_update", clock, log):
        after = session.trainer_logprobs(frozen_set)
    with _phase(phases, "weight_sync", clock, log):
        session.weight_sync(version_after)
    engine_version = session.engine_version()
    with _phase(phases, "post_sync_generation", clock, log):
        probe_samples = session.generate(probe_requests)
    probe = annotate_rollouts(probe_samples, probe_requests, tasks, engine_version)
    with _phase(phases, "post_sync_scoring", clock, log):
        probe_trainer = session.trainer_logprobs(probe)
    probe_agreement = logprob_agreement([r["behaviour_logprobs"] for r in probe], probe_trainer,
                                        [r["action_mask"] for r in probe])
    changed = changed_tensor_names(initial, updated)
    events = list(session.events)
    same_tokens = [g["response_token_ids"] for g in generated] == [f["response_token_ids"] for f in frozen_set]
    return {
        "group": group,
        "free_cache_engine": release,
        "phases": phases,
        "worker_events": events,
        "release_calls": sum(e["event"] == "engine_release" for e in events),
        "resume_calls": sum(e["event"] == "engine_resume" for e in events),
        "initial_lora_sha256": lora_state_sha256(initial),
        "updated_lora_sha256": lora_state_sha256(updated),
        "lora_tensor_count": len(updated),
        "changed_tensor_count": len(changed),
        "changed_tensors": changed,
        "trainer_version_before_update": version_before,
        "trainer_version_after_update": version_after,
        "engine_version_at_generation": generation_version,
        "engine_version_after_sync": engine_version,
        "engine_reported_versions": {"generation": _reported_versions(generated),
                                     "post_sync_generation": _reported_versions(probe)},
        "generation": generated,
        "generation_sha256": rollouts_sha256(generated),
        "generation_vs_frozen": {
            "token_ids_equal": same_tokens,
            "max_abs_logprob_difference": max(masked_abs_errors(
                [f["behaviour_logprobs"] for f in frozen_set], [g["behaviour_logprobs"] for g in generated],
                masks), default=0.0) if same_tokens else None,
        },
        "frozen_sha256": rollouts_sha256(frozen_set),
        "frozen_rollouts": frozen_set if frozen is None else None,
        "update": update,
        "same_version_before_update": {"compared": "trainer log-probs at the frozen rollouts' policy version vs "
                                                   "their behaviour log-probs", **before_agreement},
        "same_version_after_sync": {"compared": "rollout engine log-probs after the weight sync vs the updated "
                                                "trainer on the same tokens", **probe_agreement,
                                    "probe_sha256": rollouts_sha256(probe), "probe_count": len(probe)},
        "rescored": {"before_update": before, "after_update": after},
        "admission": admission(frozen_set, after, drift_threshold, version_after),
        "lora_tensors": {"initial": initial_state, "updated": updated_state},
    }
