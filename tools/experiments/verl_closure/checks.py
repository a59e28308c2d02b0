"""The checks of a run (each a boolean, all true for a valid run) and the decision derived from them."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tools.experiments.verl_closure.comparisons import within_limits
from tools.experiments.verl_closure.config import ClosureConfig
from tools.experiments.verl_closure.overrides import FREE_CACHE_KEY, override_differences
from tools.experiments.verl_closure.protocol import expected_phases

DECISIONS = ("pass", "pairing_failed", "checks_failed")


def settings_differences(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    return sorted(key for key in set(first) | set(second) if first.get(key) != second.get(key))


def phase_order_ok(phases: Sequence[Mapping[str, Any]], expected: Sequence[str]) -> bool:
    """The phases are the expected ones, in order, each ending after it starts and before the next."""
    if [p["name"] for p in phases] != list(expected):
        return False
    return all(p["end"] >= p["start"] for p in phases) and all(
        later["start"] >= earlier["end"] for earlier, later in zip(phases, phases[1:]))


def _versions_consistent(group: Mapping[str, Any]) -> bool:
    """Driver counters line up, and the engine reports the version the driver synced into it."""
    reported = group["engine_reported_versions"]
    counters = (group["trainer_version_after_update"] == group["trainer_version_before_update"] + 1
                and group["engine_version_at_generation"] == group["trainer_version_before_update"]
                and group["engine_version_after_sync"] == group["trainer_version_after_update"])
    return counters and reported["generation"] == [group["engine_version_at_generation"]] \
        and reported["post_sync_generation"] == [group["engine_version_after_sync"]]


def system_checks(groups: Mapping[str, Mapping[str, Any]], *, settings: Mapping[str, Mapping[str, Any]],
                  overrides: Mapping[str, Sequence[str]] | None, config: ClosureConfig, sample_count: int,
                  update_comparison: Mapping[str, Any], memory_settling: Mapping[str, Any]) -> dict:
    """Each check a boolean; all true for a valid run.

    `update_comparison` is `comparisons.compare_lora_updates` of the two groups; `memory_settling`
    is what the runner recorded about device memory between the groups.
    """
    release, retain = groups["release"], groups["retain"]
    limits = {"mean_limit": config.same_version_mean_abs_limit, "p99_limit": config.same_version_p99_abs_limit}
    setting_diff = settings_differences(settings["release"], settings["retain"])
    override_diff = None if overrides is None else override_differences(overrides["release"], overrides["retain"])
    relative = update_comparison.get("relative_difference")
    return {
        "initial_lora_hash_equal": release["initial_lora_sha256"] == retain["initial_lora_sha256"],
        "config_differs_only_in_free_cache_engine": setting_diff == ["free_cache_engine"] and (
            override_diff is None or override_diff == [FREE_CACHE_KEY]),
        "frozen_rollouts_shared": release["frozen_sha256"] == retain["frozen_sha256"],
        "frozen_rollouts_aligned": all(
            len(r["response_token_ids"]) == len(r["behaviour_logprobs"]) == sum(r["action_mask"]) > 0
            and r["policy_version"] == release["trainer_version_before_update"]
            for r in release["frozen_rollouts"]),
        "parameters_changed": all(g["changed_tensor_count"] > 0 for g in groups.values()),
        "updated_lora_within_tolerance": bool(update_comparison.get("names_match")) and relative is not None
        and relative <= config.updated_lora_relative_tolerance,
        "same_version_before_update_within_limits": all(
            within_limits(g["same_version_before_update"], **limits) for g in groups.values()),
        "same_version_after_sync_within_limits": all(
            within_limits(g["same_version_after_sync"], **limits) for g in groups.values()),
        "admission_recorded": all(
            g["admission"]["admitted"] + g["admission"]["rejected"] == len(release["frozen_rollouts"])
            for g in groups.values()),
        "policy_versions_consistent": all(_versions_consistent(g) for g in groups.values()),
        "stage_events_complete": all(phase_order_ok(g["phases"], expected_phases(name))
                                     for name, g in groups.items()),
        "release_resume_match_config": (release["release_calls"] > 0 and release["resume_calls"] > 0
                                        and retain["release_calls"] == 0 and retain["resume_calls"] == 0),
        "device_memory_settled_between_groups": all(entry["settled"] is not False
                                                    for entry in memory_settling.get("before_group", {}).values()),
        "resource_sampling_active": sample_count > 0,
    }


def decide(checks: Mapping[str, bool]) -> dict:
    """pass when every check holds; a different initial LoRA is a failed pairing, reported as such."""
    failed = [name for name, ok in checks.items() if not ok]
    if not failed:
        status, note = "pass", "every check holds; stage observations and the strict pairing are both valid"
    elif not checks["initial_lora_hash_equal"]:
        status = "pairing_failed"
        note = ("the groups started from different LoRA weights: stage observations are kept, but differences "
                "cannot be attributed to free_cache_engine")
    else:
        status, note = "checks_failed", "see the failed checks"
    return {"status": status, "failed_checks": failed, "note": note}
