"""The toy experiment's runner: `run(plan, sink, log=None)`, the contract every experiment follows."""

import time

SCHEMA = "toy-experiment/v1"
VARIANTS = ("small", "large")
DEFAULT_SEEDS = (1, 2)


def value_of(variant: str, seed: int) -> int:
    """A deterministic stand-in for a measurement."""
    return (VARIANTS.index(variant) + 1) * 1000 + seed


def run(plan, sink, *, log=None):
    variants = plan.variants or VARIANTS
    seeds = plan.seeds or DEFAULT_SEEDS
    if not plan.writes:
        if log is not None:
            log(f"toy {plan.stage} (dry_run): variants {list(variants)}, seeds {list(seeds)}; nothing is written")
        return
    if plan.stage == "measure":
        sink.require_new([f"measure_{variant}" for variant in variants])
        for variant in variants:
            sink.save_record(f"measure_{variant}", {
                "status": "ok", "variant": variant, "seeds": list(seeds),
                "values": [value_of(variant, seed) for seed in seeds], "model": plan.model,
                "model_source": plan.model_source, "limits": plan.limits.public(),
            }, schema_version=SCHEMA)
    elif plan.stage == "summarise":
        sink.require_new(["summary"])
        upstream = {variant: sink.read(f"measure_{variant}", schema_version=SCHEMA) for variant in variants}
        sink.save_record("summary", {
            "status": "ok",
            "best": max(upstream, key=lambda name: max(upstream[name]["values"])),
            "lineage": [sink.lineage(sink.record_path(f"measure_{variant}")) for variant in variants],
        }, schema_version=SCHEMA)
    elif plan.stage == "sleep":
        time.sleep(float(plan.option("sleep_s", 3600.0)))
