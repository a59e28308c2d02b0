"""Project 84 (offline DPO): DPO from project 62's delivered SFT adapter on offline preference pairs,
an independent evaluation on pairs it never saw, and the adoption decision against 62's adapter.

Before any work the runner reads 62's delivery manifest (present, promised sha256 (required in
real_gpu), seal, run mode, decision `delivered`) and checks every file of the delivered adapter
against the sha256 the manifest lists. Then:

    admission     the pairs of `tools.data.preference_pairs` tokenised; every split admitted by the
                  plan's `admit_pairs` (prompt and response truncation measured apart; a pair whose
                  reply would be cut is refused); the evaluation split's sha256 pinned, not opened
    training      per seed, two arms from 62's adapter with the same budget (the same pairs drawn by
                  the seed, the same updates, beta and learning rate): DPO on the admitted pairs, and
                  the mislabelled control (chosen and rejected swapped); the reference is 62's adapter,
                  frozen; seed 1's DPO adapter is the candidate, saved in peft's format and hashed
    evaluation    the evaluation split opened once (its sha256 checked against the pin): per seed and
                  arm, every held-out pair judged in both orders by the plan's
                  `independent_evaluation`; answer exact match on the task's held-out problems and on
                  the base's own skill (plain sums), for 62's adapter (the baseline row) and each arm
    decision      the plan's `adoption_decision` from the admission, the evaluation, the paired
                  effects over seeds against 62's adapter, and the resources (training memory: the
                  allocator's peak on CUDA, the training state accounted from the tensors on the CPU;
                  serving cost: the adapter's file size against 62's)

Records: `admission`, `evaluation` and the sealed candidate `manifest` (inputs with sha256, the
candidate adapter's files and tensor hash, the gates, the decision); project 86 reads the manifest.
"""

from __future__ import annotations

import copy
import os
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Mapping

from tools.core.catalog import find_chapter
from tools.core.effects import paired_effect
from tools.core.handoff import check_manifest_body, fix_command, require_manifest, seal
from tools.core.records import sha256_file
from tools.data import preference_pairs, sft_raw
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.experiments.preference import offline_gates
from tools.experiments.preference.logprobs import pack, response_logprobs
from tools.experiments.preference.training import PreferenceRow, dpo_updates, reply_ids
from tools.models.adapters import save_adapter

CHAPTER_ID = "84"
UPSTREAM_ID = "62"
UPSTREAM_SCHEMA = "sft-delivery-manifest/v2"
"""The schema of project 62's manifest this project reads (tools.experiments.sft_chain.delivery)."""
UPSTREAM_DECISIONS = ("delivered",)
ADMISSION_SCHEMA = "offline-dpo-admission/v1"
EVALUATION_SCHEMA = "offline-dpo-evaluation/v1"
MANIFEST_SCHEMA = "offline-dpo-candidate-manifest/v1"
RECORD_STAGES = ("admission", "evaluation", "manifest")
GATE_NAMES = ("admit_pairs", "independent_evaluation", "adoption_decision")
ARMS = ("dpo", "swapped")
"""The DPO candidate and its negative control (the same pairs with chosen and rejected swapped)."""
TASK_SET, SKILL_SET = "task_heldout", "base_skill_heldout"
MIB = 2 ** 20
SETTINGS = {
    "cpu_smoke": {"max_prompt_tokens": 56, "max_length": 64, "max_prompt_truncation": 0.05, "min_pairs": 24,
                  "train_pairs": 24, "updates": 12, "beta": 0.1, "learning_rate": 1e-4, "seeds": (1, 2, 3),
                  "regression_tolerance": 0.05, "memory_budget_bytes": 256 * MIB},
    "real_gpu": {"max_prompt_tokens": 512, "max_length": 1024, "max_prompt_truncation": 0.05, "min_pairs": 20,
                 "train_pairs": 20, "updates": 12, "beta": 0.1, "learning_rate": 5e-6, "seeds": (1, 2, 3),
                 "regression_tolerance": 0.05, "memory_budget_bytes": 16 * 1024 * MIB},
}
"""cpu_smoke: limits the lab-task pairs reach (a prompt is about 46 tokens, the planted context 156, a worked reply
about 40). real_gpu: the original course's length 1024, 12 updates and beta 0.1 on its 24 raw training pairs; the
lab-task pairs are far shorter than 512 / 1024 Qwen tokens, so there only the identical pair is refused and both
truncation rates measure 0. The real_gpu learning rate is not calibrated on a GPU (no run here); the memory
budget is the original's 16 GiB card."""


def describe(run_mode: str) -> str:
    mode = "real_gpu" if run_mode == "dry_run" else run_mode
    s = SETTINGS[mode]
    return (f"offline_dpo ({run_mode}): reads project 62's delivery manifest and its adapter (every file's sha256), "
            f"admits the preference pairs (prompt limit {s['max_prompt_tokens']}, length {s['max_length']}), trains "
            f"DPO from 62's adapter on {s['train_pairs']} pairs per seed ({s['updates']} updates, beta {s['beta']}) "
            f"beside a mislabelled control, seeds {s['seeds']}, opens the evaluation pairs once, and decides "
            "accept / tune / reject against 62's adapter; nothing is read or written in dry_run")


def candidate_folder(sink) -> Path:
    return sink.results_root / sink.slug / f"{sink.slug}_candidate_{sink.run_label}"


# ---- the upstream -------------------------------------------------------------------------------

def promised_sha256(options: Mapping) -> str | None:
    """The sha256 promised for 62's manifest: the notebook's `{"62": sha256}`, the command line's pairs,
    or one str; None when nothing was promised (the seal alone is checked)."""
    promised = options.get("upstream_sha256")
    if isinstance(promised, (list, tuple)):
        promised = dict(promised)
    if isinstance(promised, Mapping):
        return promised.get(UPSTREAM_ID)
    if promised is None or isinstance(promised, str):
        return promised
    raise ConfigError(f"UPSTREAM_SHA256 must be a dict {{project id: sha256}}, got {promised!r}")


def read_delivery(root: Path, run_mode: str, label: str, options: Mapping):
    """62's manifest after every check of `require_manifest`, and its adapter folder after every file
    was found with the sha256 the manifest lists (UpstreamRecordError naming the file otherwise)."""
    promised = promised_sha256(options)
    if run_mode == "real_gpu" and promised is None:
        raise ConfigError(f"project {CHAPTER_ID} in real_gpu needs UPSTREAM_SHA256 for project {UPSTREAM_ID}: the "
                          f"seal alone does not catch a manifest edited and sealed again. Nothing was run. Fix: "
                          f"{fix_command(CHAPTER_ID, run_mode)}", cause="no promised sha256",
                          fix=fix_command(CHAPTER_ID, run_mode))
    upstream = require_manifest(root, chapter_id=UPSTREAM_ID, slug=find_chapter(UPSTREAM_ID).slug,
                                label=options.get("upstream_label") or label, run_mode=run_mode,
                                promised_sha256=promised, schema_version=UPSTREAM_SCHEMA,
                                decisions=UPSTREAM_DECISIONS, reader=f"project {CHAPTER_ID}", reader_id=CHAPTER_ID)
    adapter = upstream.record["delivery"]["adapter"]
    folder = Path(root) / adapter["folder"]
    for name, digest in sorted(adapter["files"].items()):
        path = folder / name
        if not path.is_file() or sha256_file(path) != digest:
            state = "missing" if not path.is_file() else "changed"
            raise UpstreamRecordError(
                f"project {UPSTREAM_ID}'s delivered adapter file {adapter['folder']}/{name} is {state} (its manifest "
                f"lists sha256 {digest[:12]}...). Nothing was run. Fix: {fix_command(CHAPTER_ID, run_mode)}",
                stage="manifest", cause=f"adapter file {state}", fix=fix_command(CHAPTER_ID, run_mode))
    return upstream, folder


# ---- the pairs ----------------------------------------------------------------------------------

def prompt_tokens(tokenizer, pair: Mapping) -> list[int]:
    from tools.models.lab_chat import prompt_ids

    return list(prompt_ids(tokenizer, pair["messages"]))


def token_counts(tokenizer, pairs) -> list[dict]:
    """What `admit_pairs` reads of each pair: its id, texts and token counts (a reply counts its end of turn)."""
    return [{"id": pair["id"], "prompt_tokens": len(prompt_tokens(tokenizer, pair)),
             "chosen_tokens": len(reply_ids(tokenizer, pair["chosen"])),
             "rejected_tokens": len(reply_ids(tokenizer, pair["rejected"])), "chosen": pair["chosen"],
             "rejected": pair["rejected"]} for pair in pairs]


def rows_of(tokenizer, pairs, max_prompt_tokens: int, *, swapped: bool = False) -> list[PreferenceRow]:
    """Admitted pairs as rows; a prompt over the limit keeps its last `max_prompt_tokens` tokens."""
    rows = []
    for pair in pairs:
        chosen, rejected = reply_ids(tokenizer, pair["chosen"]), reply_ids(tokenizer, pair["rejected"])
        if swapped:
            chosen, rejected = rejected, chosen
        rows.append(PreferenceRow(tuple(prompt_tokens(tokenizer, pair)[-max_prompt_tokens:]), chosen, rejected))
    return rows


# ---- measuring ----------------------------------------------------------------------------------

def exact_match(model, tokenizer, items, pad_id: int, batch_size: int = 128) -> float:
    """Answer exact match (every reply token the argmax given the right prefix, end of turn included)
    over `(messages, reply)` items."""
    from tools.models.lab import training_batch, teacher_forced_exact_match
    from tools.models.lab_chat import chat_ids

    rendered = [chat_ids(tokenizer, messages, reply) for messages, reply in items]
    device = next(model.parameters()).device
    hits = 0.0
    for start in range(0, len(rendered), batch_size):
        chunk = rendered[start:start + batch_size]
        batch = {name: tensor.to(device) for name, tensor in training_batch(chunk, pad_id).items()}
        hits += teacher_forced_exact_match(model, batch) * len(chunk)
    return round(hits) / len(rendered)


def judgements(policy, reference, tokenizer, pairs, max_prompt_tokens: int, pad_id: int) -> list[dict]:
    """Every pair judged in both orders: the chosen reply first (the rejected second), then the other
    way round, each order packed as its own batch; the four summed log-probabilities of each order."""
    rows = rows_of(tokenizer, pairs, max_prompt_tokens)
    found = []
    for order in offline_gates.ORDERS:
        firsts = [row.chosen_ids if order == "chosen_first" else row.rejected_ids for row in rows]
        seconds = [row.rejected_ids if order == "chosen_first" else row.chosen_ids for row in rows]
        prompts = [row.prompt_ids for row in rows]
        batch = pack(prompts + prompts, firsts + seconds, pad_id)
        policy_logps = response_logprobs(policy, batch, frozen=True).tolist()
        reference_logps = response_logprobs(reference, batch, frozen=True).tolist()
        n = len(rows)
        found += [{"pair_id": pair["id"], "prompt": preference_pairs.prompt_text(pair), "order": order,
                   "policy_first": policy_logps[i], "policy_second": policy_logps[n + i],
                   "reference_first": reference_logps[i], "reference_second": reference_logps[n + i]}
                  for i, pair in enumerate(pairs)]
    return found


def sequence_preference(model, tokenizer, pairs, max_prompt_tokens: int, pad_id: int) -> float:
    """Share of pairs whose chosen reply has the higher summed log-probability under `model` alone
    (what the input model already prefers; no reference)."""
    rows = rows_of(tokenizer, pairs, max_prompt_tokens)
    prompts = [row.prompt_ids for row in rows]
    logps = response_logprobs(model, pack(prompts + prompts, [row.chosen_ids for row in rows]
                                          + [row.rejected_ids for row in rows], pad_id), frozen=True).tolist()
    return sum(logps[i] > logps[len(rows) + i] for i in range(len(rows))) / len(rows)


def training_state_bytes(model) -> int:
    """Bytes of what a training step holds beyond activations, accounted from the tensors: every
    parameter, and for each trainable one its gradient and AdamW's two moments."""
    total = 0
    for parameter in model.parameters():
        size = parameter.numel() * parameter.element_size()
        total += size * (4 if parameter.requires_grad else 1)
    return total


def load_adapter(base, folder: Path, *, trainable: bool):
    """62's adapter on a copy of the base: the policy (trainable LoRA) or the frozen reference."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(copy.deepcopy(base), str(folder), is_trainable=trainable)
    if not trainable:
        model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
    return model


def train_arm(base, adapter_folder: Path, reference, rows, settings: Mapping, seed: int, pad_id: int,
              device: str) -> tuple[object, dict]:
    """One arm of one seed: 62's adapter trained by DPO on `rows`; the policy and what was measured."""
    import torch

    torch.manual_seed(seed)
    policy = load_adapter(base, adapter_folder, trainable=True)
    state_bytes = training_state_bytes(policy) + training_state_bytes(reference)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    history = dpo_updates(policy, reference, rows, beta=settings["beta"], steps=settings["updates"],
                          learning_rate=settings["learning_rate"], pad_id=pad_id)
    seconds = time.perf_counter() - started
    peak = int(torch.cuda.max_memory_allocated()) if device == "cuda" else state_bytes
    return policy, {"history": history, "train_s": seconds, "peak_memory_bytes": peak,
                    "memory_source": "torch.cuda.max_memory_allocated" if device == "cuda"
                    else "accounted: parameters of policy and reference, gradients and AdamW moments"}


# ---- the run ------------------------------------------------------------------------------------

def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    if not plan.writes:
        say(describe(plan.run_mode))
        return
    gates = SimpleNamespace(**{name: plan.mechanism.function(name, getattr(offline_gates, name))
                               for name in GATE_NAMES})
    mechanism = plan.mechanism.describe({name: getattr(offline_gates, name) for name in GATE_NAMES})
    settings = dict(SETTINGS[plan.run_mode])
    sink.require_new(RECORD_STAGES)
    root, folder = sink.results_root, candidate_folder(sink)
    if folder.exists():
        raise RecordExistsError(f"{folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    upstream, adapter_folder = read_delivery(root, plan.run_mode, sink.run_label, plan.options)
    delivery = upstream.record["delivery"]
    model_id = delivery["base_model"]["model_id"]
    say(describe(plan.run_mode))
    import torch

    from tools.core.numerics import cpu_numerics
    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    before_threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(1)
    try:
        base_folder = resolve_model(model_id, plan.model_source, cache_dir=plan.model_cache)
        dtype = "float32" if plan.device == "cpu" else "bfloat16"
        base, tokenizer = load_causal_lm(base_folder, dtype=dtype, device=plan.device)
        base.config.use_cache = False
        identity = model_identity(base_folder)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

        # admission: every split, the evaluation split pinned by its sha256 (not opened before the end)
        raw = preference_pairs.build_pairs(plan.run_mode)
        limits = {key: settings[key] for key in ("max_prompt_tokens", "max_length", "max_prompt_truncation",
                                                 "min_pairs")}
        counts = {split: token_counts(tokenizer, raw[split]) for split in preference_pairs.SPLITS}
        admitted = {}
        for split in preference_pairs.SPLITS:
            minimum = limits["min_pairs"] if split == "train" else 1
            admitted[split] = gates.admit_pairs(counts[split], limits["max_prompt_tokens"], limits["max_length"],
                                                limits["max_prompt_truncation"], minimum)
        pinned = preference_pairs.pairs_sha256(raw["evaluation"])
        admission_body = {"limits": limits, "pairs_version": preference_pairs.PAIRS_VERSION,
                          "sizes": {split: len(pairs) for split, pairs in raw.items()},
                          "split_sha256": {split: preference_pairs.pairs_sha256(pairs) for split, pairs in raw.items()},
                          "planted": {pair["id"]: pair["planted"] for pair in raw["train"] if pair["planted"]},
                          "token_counts": counts, "admission": admitted, "mechanism": mechanism,
                          "comparability": preference_pairs.COMPARABILITY_NOTE}
        admission_path, _ = sink.save_record("admission", admission_body, schema_version=ADMISSION_SCHEMA)
        say("84 admission: " + "; ".join(
            f"{split} {len(result['admitted'])}/{len(raw[split])} admitted ({result['decision']}, prompt truncation "
            f"{result['prompt_truncation_rate']}, response truncation {result['response_truncation_rate']:.3f})"
            for split, result in admitted.items()))
        data_ok = all(result["decision"] == "accept" for result in admitted.values())
        keep = {split: set(result["admitted"]) for split, result in admitted.items()}
        pairs = {split: [pair for pair in raw[split] if pair["id"] in keep[split]] for split in raw}

        reference = load_adapter(base, adapter_folder, trainable=False)
        seeds = tuple(plan.seeds or settings["seeds"])
        arms: dict[str, dict[int, dict]] = {arm: {} for arm in ARMS}
        policies: dict[str, dict[int, object]] = {arm: {} for arm in ARMS}
        validation = rows_of(tokenizer, pairs["validation"], settings["max_prompt_tokens"])
        if data_ok:
            from tools.experiments.preference.training import preference_margin

            for seed in seeds:
                drawn = random.Random(seed).sample(pairs["train"], settings["train_pairs"])
                for arm in ARMS:
                    rows = rows_of(tokenizer, drawn, settings["max_prompt_tokens"], swapped=arm == "swapped")
                    policy, measured = train_arm(base, adapter_folder, reference, rows, settings, seed, pad_id,
                                                 plan.device)
                    measured["validation"] = preference_margin(policy, reference, validation, pad_id)
                    measured["pairs"] = [pair["id"] for pair in drawn]
                    arms[arm][seed], policies[arm][seed] = measured, policy
                say(f"  seed {seed}: DPO loss {arms['dpo'][seed]['history'][0]['loss']:.4f} -> "
                    f"{arms['dpo'][seed]['history'][-1]['loss']:.4f}, validation pair accuracy "
                    f"{arms['dpo'][seed]['validation']['pair_accuracy']:.3f} (control "
                    f"{arms['swapped'][seed]['validation']['pair_accuracy']:.3f})")

        # the evaluation split, opened once
        if preference_pairs.pairs_sha256(preference_pairs.build_split("evaluation", plan.run_mode)) != pinned:
            raise UpstreamRecordError("the evaluation pairs changed after they were pinned; nothing was evaluated")
        held = pairs["evaluation"]
        task_items = [(pair["messages"], pair["chosen"]) for pair in held]
        skill_items = [(problem.messages(), problem.target) for problem in sft_raw.base_skill_suite("heldout")]
        train_prompts = sorted({preference_pairs.prompt_text(pair) for pair in pairs["train"]})
        baseline = {TASK_SET: exact_match(reference, tokenizer, task_items, pad_id),
                    SKILL_SET: exact_match(reference, tokenizer, skill_items, pad_id),
                    "sequence_preference": sequence_preference(reference, tokenizer, held,
                                                               settings["max_prompt_tokens"], pad_id)}
        candidate_seed = seeds[0]
        candidate_judgements = None
        for arm in ARMS:
            for seed, policy in policies[arm].items():
                judged = judgements(policy, reference, tokenizer, held, settings["max_prompt_tokens"], pad_id)
                if arm == "dpo" and seed == candidate_seed:
                    candidate_judgements = judged
                arms[arm][seed].update({
                    "evaluation": gates.independent_evaluation(judged, train_prompts),
                    TASK_SET: exact_match(policy, tokenizer, task_items, pad_id),
                    SKILL_SET: exact_match(policy, tokenizer, skill_items, pad_id),
                    "sequence_preference": sequence_preference(policy, tokenizer, held,
                                                               settings["max_prompt_tokens"], pad_id)})
        candidate = None
        if data_ok:
            files = save_adapter(policies["dpo"][candidate_seed], folder / "adapter",
                                   delivery["base_model"]["model_id"], delivery["base_model"].get("revision"))
            candidate = {"folder": (folder / "adapter").relative_to(root).as_posix(), "files": files,
                         "seed": candidate_seed, "adapter_sha256": files["adapter_model.safetensors"],
                         "format": "peft LoRA (adapter_config.json, adapter_model.safetensors)",
                         "trained_from": {"adapter_folder": delivery["adapter"]["folder"],
                                          "adapter_sha256": delivery["adapter"]["adapter_sha256"]}}
    finally:
        torch.set_num_threads(before_threads)

    effects = None
    if data_ok:
        def effect(arm, key, metric, control=None):
            values = {seed: arms[arm][seed][key] for seed in seeds}
            return paired_effect(values, control or {seed: baseline[key] for seed in seeds}, metric=metric)

        effects = {
            "task_gain": effect("dpo", TASK_SET, "held-out task exact match, DPO minus 62's adapter"),
            "base_skill_change": effect("dpo", SKILL_SET, "base skill exact match, DPO minus 62's adapter"),
            "pair_accuracy_over_chance": paired_effect(
                {seed: arms["dpo"][seed]["evaluation"]["pair_accuracy"] for seed in seeds},
                {seed: 0.5 for seed in seeds}, metric="held-out pair accuracy (both orders) minus chance 0.5"),
            "pair_accuracy_over_control": paired_effect(
                {seed: arms["dpo"][seed]["evaluation"]["pair_accuracy"] for seed in seeds},
                {seed: arms["swapped"][seed]["evaluation"]["pair_accuracy"] for seed in seeds},
                metric="held-out pair accuracy, DPO minus the mislabelled control"),
            "control_task_change": effect("swapped", TASK_SET, "held-out task exact match, control minus 62's adapter"),
        }
    adapter_size = (folder / "adapter" / "adapter_model.safetensors").stat().st_size if data_ok else None
    baseline_size = (adapter_folder / "adapter_model.safetensors").stat().st_size
    resources = {"peak_memory_bytes": arms["dpo"][candidate_seed]["peak_memory_bytes"] if data_ok else None,
                 "memory_budget_bytes": settings["memory_budget_bytes"],
                 "adapter_bytes": adapter_size or baseline_size, "baseline_adapter_bytes": baseline_size}
    if data_ok:
        decided = gates.adoption_decision(admitted["train"], arms["dpo"][candidate_seed]["evaluation"],
                                          effects["task_gain"], effects["base_skill_change"], resources,
                                          settings["regression_tolerance"])
    else:
        decided = {"decision": "reject" if admitted["train"]["decision"] == "reject" else "tune",
                   "reasons": ["data_admitted"],
                   "gates": [{"name": "data_admitted", "threshold": "accept", "measured": admitted["train"]["decision"],
                              "passed": False}],
                   "next_action": offline_gates.NEXT_ACTIONS["tune"]}
    report = {"model": {**identity, "model_id": model_id, "dtype": dtype, "device": plan.device},
              "upstream": {"manifest": upstream.entry(root), "adapter": delivery["adapter"]["folder"],
                           "adapter_sha256": delivery["adapter"]["adapter_sha256"]},
              "settings": {**settings, "seeds": list(seeds)}, "baseline": baseline,
              "arms": {arm: {str(seed): value for seed, value in values.items()} for arm, values in arms.items()},
              "effects": effects, "resources": resources, "decision": decided, "candidate": candidate,
              "evaluation_split": {"sha256": pinned, "pairs": len(held), "opened": "once, after training"},
              "candidate_judgements": candidate_judgements, "train_prompts": train_prompts,
              "task_problems": len(task_items), "skill_problems": len(skill_items), "mechanism": mechanism,
              "numerics": {"cpu_numerics": cpu_numerics(),
                           "lab_models": os.environ.get("COURSE_LAB_MODELS") or "committed"},
              "comparability": preference_pairs.COMPARABILITY_NOTE}
    evaluation_path, _ = sink.save_record("evaluation", report, schema_version=EVALUATION_SCHEMA)
    outputs = [{"role": "admission_report", **sink.lineage(admission_path)},
               {"role": "evaluation_report", **sink.lineage(evaluation_path)}]
    if candidate is not None:
        outputs += [{"role": f"candidate/adapter/{name}", **sink.lineage(folder / "adapter" / name)}
                    for name in sorted(candidate["files"])]
    body = {
        "comparability": preference_pairs.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root),
                   *[{"role": f"upstream_adapter/{name}", "path": f"{delivery['adapter']['folder']}/{name}",
                      "sha256": digest} for name, digest in sorted(delivery["adapter"]["files"].items())]],
        "candidates": [{"name": f"dpo_seed_{seed}", "candidate": seed == candidate_seed,
                        **{key: arms["dpo"][seed][key] for key in (TASK_SET, SKILL_SET)},
                        "pair_accuracy": arms["dpo"][seed]["evaluation"]["pair_accuracy"]} for seed in arms["dpo"]],
        "baseline": {"name": "62's adapter, untouched", **{key: baseline[key] for key in (TASK_SET, SKILL_SET)}},
        "gates": decided["gates"],
        "decision": {"decision": decided["decision"], "reasons": decided["reasons"]},
        "next_action": decided["next_action"],
        "outputs": outputs,
        "candidate": candidate,
        "serving": "the candidate adapter" if decided["decision"] == "accept" else "62's adapter (the rollback base "
                   "stays project 62's rollback manifest)",
        "effects": effects,
        "mechanism": mechanism,
    }
    check_manifest_body(body)
    record = {**sink.header("manifest", MANIFEST_SCHEMA), "runtime": sink.runtime(), **body}
    ref = sink.save(sink.record_path("manifest"), seal(record), stage="manifest")
    say(f"84 decision: {decided['decision']} {decided['reasons'] or ''}; manifest {ref.path.name}")
