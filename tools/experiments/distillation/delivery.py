"""Project 88 (distilled student delivery): a frozen teacher, a common student start, one distillation
route, and a terminal decision that either deploys the student or leaves the final held-out set closed.

Stages (one record each, write-once):

    G0 baseline   the student as it starts and the frozen teacher, each on the development set (greedy,
                  the same decoding for every stage): per-problem correctness and reply format, and the
                  decode latency per reply (median over repeats)
    G1 route      per seed, from the same student weights: `anchored_steps` steps on teacher-written
                  trajectories that the verifier accepts (the forward KL to the teacher over the whole
                  vocabulary, DISTILL-OPD's `fixed` recipe), the development set read once at the
                  midpoint, then `distill_steps` on-policy steps (the student samples, the reverse KL to
                  the teacher, DISTILL-OPD's `on_policy` recipe)
    G2 candidate  per seed, the routed student on the development set with G0's decoding, its latency
                  timed in turn with the teacher's (the latency gate's ratio compares two models timed under
                  the same load), and its gates against G0 (`deployment_gates`); the identity and comparability check
                  (`comparability`) and the terminal decision (`terminal_decision`)

Only `accept` opens the final held-out set (the lab task's `heldout` split; a read receipt is written
and earlier reads are listed) and writes the deployment handoff (`handoff`, sealed: the candidate's
weights file with its sha256, the held-out figures). `tune` and `reject` leave the set closed and write
no handoff; the manifest (sealed, `tools.core.handoff`) records the baseline, the route, the candidate,
the gates and the decision either way. The gate and decision functions come from the plan's mechanism
(the notebook passes the learner's), the distillation losses from DISTILL-OPD's package.
"""

from __future__ import annotations

import copy
import hashlib
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Mapping

from tools.core.effects import paired_effect
from tools.core.handoff import check_manifest_body, seal
from tools.core.records import save_json_record_once
from tools.data import lab_tasks
from tools.errors import ConfigError, ModelCacheMissingError, RecordExistsError, StageFailedError
from tools.experiments.distillation import delivery_gates
from tools.experiments.distillation.training import PACKAGE_MECHANISM, distill_step, teacher_trajectories
from tools.models.architectures import LAB_MODEL_IDS
from tools.models.lab_sampling import sample, score_samples

CHAPTER_ID = "88"
SLUG = "88-distilled-student-delivery"
BASELINE_SCHEMA = "distill-delivery-baseline/v1"
ROUTE_SCHEMA = "distill-delivery-route/v1"
CANDIDATE_SCHEMA = "distill-delivery-candidate/v1"
HANDOFF_SCHEMA = "distill-delivery-handoff/v1"
MANIFEST_SCHEMA = "distill-delivery-manifest/v1"
RECEIPT_SCHEMA = "distill-heldout-read/v1"
RECORD_STAGES = ("baseline", "route", "candidate", "handoff", "manifest")
GATE_FUNCTIONS = ("comparability", "deployment_gates", "terminal_decision")
LEARNER_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, IndexError, AttributeError)
"""What a learner's gate may raise; the stage then fails naming the function."""
SEEDS = (1, 2, 3, 4, 5)
"""Seed 1's candidate is the one a handoff deploys; seeds 2-5 run the same route for the spread."""
DEV_SPLIT, FINAL_SPLIT = "validation", "heldout"
TASK = lab_tasks.PRETRAINING_TASK

PLANS = {
    "cpu_smoke": {"student": "lab", "teacher": "lab-teacher", "weights": "lab pretraining (built in code)",
                  "anchored_steps": 16, "distill_steps": 8, "prompts_per_step": 32, "learning_rate": 3e-4,
                  "train_problems": 256, "train_seed": 101, "max_new_tokens": 6, "latency_problems": 64,
                  "latency_batch": 16, "latency_repeats": 5},
    "real_gpu": {"student": "Qwen/Qwen2.5-0.5B-Instruct", "teacher": "Qwen/Qwen2.5-1.5B-Instruct",
                 "weights": "local cache, or random_init (recorded as such)", "anchored_steps": 64,
                 "distill_steps": 32, "prompts_per_step": 16, "learning_rate": 1e-5, "train_problems": 512,
                 "train_seed": 101, "max_new_tokens": 16, "latency_problems": 64, "latency_batch": 16,
                 "latency_repeats": 5},
}
"""Per run mode: the pair, the route (anchored steps, then on-policy distillation steps, 2:1 as the original
course's 64 + 32) and the latency measurement. real_gpu's teacher is the largest Qwen2.5 instruct model the
PT-DISTILL-CUDA profile's one GPU holds beside the student and the optimiser state; it is always read from the
local cache (a teacher with random weights teaches nothing), while the student follows MODEL_SOURCE: a
random_init student is recorded as such, and its tokenizer (the course's stand-in) is another family than the
teacher's, which `comparability` reports."""
THRESHOLDS = {"min_gain": 0.05, "min_retention": 0.9, "min_format": 0.95, "max_latency_ratio": 0.85}
"""The gates (`deployment_gates`): accuracy gain over G0 on the development set, share of G0's correct
problems still correct, share of well-formed replies that stopped by themselves, and the candidate's decode
latency as a share of the teacher's. A plan may override them (`thresholds` option) to show another outcome."""


def describe(run_mode: str) -> str:
    plan = PLANS["real_gpu" if run_mode == "dry_run" else run_mode]
    return (f"distill_delivery ({run_mode}): teacher {plan['teacher']} (frozen), student {plan['student']}; G0 both on "
            f"the development split, G1 {plan['anchored_steps']} anchored + {plan['distill_steps']} on-policy "
            f"distillation steps per seed {SEEDS}, G2 the candidates with G0's decoding and gates {THRESHOLDS}; the "
            "final held-out split is opened (and a handoff written) only on accept; nothing is read or written in "
            "dry_run")


def weights_sha256(model) -> str:
    """sha256 of a model's tensors (names, dtypes, shapes and bytes), whatever file they came from."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(value.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def tokenizer_sha256(tokenizer) -> str:
    """sha256 of what makes two tokenizers one family: the vocabulary (token -> id), the special tokens and
    the chat template."""
    payload = {"vocab": sorted(tokenizer.get_vocab().items()), "special": sorted(tokenizer.all_special_tokens),
               "chat_template": tokenizer.chat_template}
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode("utf-8")).hexdigest()


def problems_sha256(problems) -> str:
    """The identity of an evaluation set: the sorted content hashes of its problems."""
    return hashlib.sha256("".join(sorted(problem.content_sha256 for problem in problems)).encode()).hexdigest()


def decoding_of(settings: Mapping) -> dict:
    return {"strategy": "greedy", "temperature": 0.0, "max_new_tokens": settings["max_new_tokens"],
            "stop": "end of turn"}


def evaluate(model, tokenizer, problems, decoding: Mapping) -> dict:
    """Greedy replies to `problems`: per problem, correct and formatted (the verifier reads an answer and the
    reply ended by itself, not at the token limit), and the counts."""
    replies = sample(model, tokenizer, [problem.messages() for problem in problems], temperature=0.0,
                     max_new_tokens=decoding["max_new_tokens"])
    scored = score_samples(problems, replies)
    correct = [bool(item["correct"]) for item in scored]
    formatted = [bool(item["format_ok"]) and reply["finish_reason"] == "stop" for item, reply in zip(scored, replies)]
    return {"problems": len(problems), "eval_sha256": problems_sha256(problems), "decoding": dict(decoding),
            "correct": correct, "formatted": formatted, "accuracy": sum(correct) / len(correct),
            "format_share": sum(formatted) / len(formatted),
            "mean_reply_tokens": sum(len(reply["response_ids"]) for reply in replies) / len(replies)}


def decode_latency(models: Mapping, tokenizer, problems, settings: Mapping, device: str) -> dict:
    """Seconds per reply of greedy decoding for each of `models` (name -> model, one tokenizer), in batches of
    `latency_batch`: one warm-up pass each (not counted), then `latency_repeats` rounds in which every model
    makes one pass in turn, so that models compared with each other are timed under the same load; the median
    pass per model. On the CPU the clock is the thread's CPU time (one thread: what the decode computed, not
    what other processes took); on CUDA the wall clock after a synchronise."""
    import torch

    prompts = [problem.messages() for problem in problems[:settings["latency_problems"]]]
    batch = settings["latency_batch"]
    cuda = device == "cuda"
    clock = time.perf_counter if cuda else time.thread_time

    def one_pass(model) -> float:
        if cuda:
            torch.cuda.synchronize()
        started = clock()
        for start in range(0, len(prompts), batch):
            sample(model, tokenizer, prompts[start:start + batch], temperature=0.0,
                   max_new_tokens=settings["max_new_tokens"])
        if cuda:
            torch.cuda.synchronize()
        return (clock() - started) / len(prompts)

    for model in models.values():
        one_pass(model)
    passes = {name: [] for name in models}
    for _ in range(settings["latency_repeats"]):
        for name, model in models.items():
            passes[name].append(one_pass(model))
    return {name: {"latency_s": statistics.median(values), "passes_s": values, "replies": len(prompts),
                   "batch": batch, "warmup_passes": 1, "interleaved_with": sorted(set(models) - {name}),
                   "clock": "wall clock after torch.cuda.synchronize" if cuda else "thread CPU time (one thread)"}
            for name, values in passes.items()}


def load_pair(plan, settings: Mapping) -> tuple:
    """`(student, teacher, tokenizer, teacher_tokenizer, identities)`: both models in eval mode on the plan's
    device; the teacher frozen (no gradient). Both are found before either is loaded, so a missing cache stops
    the run before any work (the error names the download command)."""
    from transformers.utils import logging as transformers_logging

    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        try:  # the teacher first: a missing cache stops the run before a random_init student is built
            teacher_folder = resolve_model(settings["teacher"], plan.model_source if settings["teacher"] in LAB_MODEL_IDS
                                           else "local", plan.model_cache)
        except ModelCacheMissingError as error:
            raise ModelCacheMissingError(f"the teacher is read from the local cache whatever MODEL_SOURCE says (a teacher "
                                         f"with random weights teaches nothing). {error}") from None
        folders = {"student": resolve_model(settings["student"], plan.model_source, plan.model_cache),
                   "teacher": teacher_folder}
        loaded = {}
        for role, folder in folders.items():
            model, tokenizer = load_causal_lm(folder, device=plan.device)
            model.eval()
            identity = model_identity(folder)
            loaded[role] = (model, tokenizer, {"model_id": settings[role], "weights": identity.get("weights"),
                                               "source": identity.get("source"),
                                               "revision": identity.get("revision"),
                                               "tokenizer_sha256": tokenizer_sha256(tokenizer),
                                               "weights_sha256": weights_sha256(model),
                                               "parameters": sum(p.numel() for p in model.parameters())})
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    teacher = loaded["teacher"][0]
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    return (loaded["student"][0], loaded["teacher"][0], loaded["student"][1], loaded["teacher"][1],
            {"student": loaded["student"][2], "teacher": loaded["teacher"][2]})


def run_route(start, teacher, tokenizer, settings: Mapping, seed: int, anchors: list, dev, decoding: Mapping,
              log: Callable) -> tuple:
    """G1 for one seed: a copy of the common start, `anchored_steps` on the verified teacher trajectories, the
    development set at the midpoint, then `distill_steps` on-policy steps. Returns `(student, route record)`."""
    import torch

    torch.manual_seed(seed)
    student = copy.deepcopy(start)
    start_sha256 = weights_sha256(student)
    optimizer = torch.optim.AdamW(student.parameters(), lr=settings["learning_rate"], weight_decay=0.0)
    order = torch.randperm(len(anchors), generator=torch.Generator().manual_seed(seed)).tolist()
    steps, midpoint = [], None
    total = settings["anchored_steps"] + settings["distill_steps"]
    for step in range(total):
        anchored = step < settings["anchored_steps"]
        if step == settings["anchored_steps"]:
            midpoint = evaluate(student.eval(), tokenizer, dev, decoding)
        chosen = [anchors[order[(step * settings["prompts_per_step"] + offset) % len(anchors)]]
                  for offset in range(settings["prompts_per_step"])]
        if anchored:
            replies = [item["reply"] for item in chosen]
        else:
            replies = sample(student, tokenizer, [item["problem"].messages() for item in chosen], temperature=1.0,
                             max_new_tokens=settings["max_new_tokens"], seed=seed * 1000 + step)
        student.train()
        record = distill_step(student, teacher, optimizer, tokenizer, [reply["prompt_ids"] for reply in replies],
                              [reply["response_ids"] for reply in replies], "fixed" if anchored else "on_policy",
                              PACKAGE_MECHANISM)
        steps.append({"step": step, "phase": "anchored" if anchored else "on_policy", **record})
    student.eval()
    if midpoint is None:
        midpoint = evaluate(student, tokenizer, dev, decoding)
    log(f"  seed {seed}: route {settings['anchored_steps']} anchored + {settings['distill_steps']} on-policy steps, "
        f"development accuracy at the midpoint {midpoint['accuracy']:.3f}")
    return student, {"seed": seed, "start_sha256": start_sha256, "steps": steps, "midpoint": midpoint,
                     "end_sha256": weights_sha256(student)}


def anchor_set(teacher, tokenizer, settings: Mapping) -> dict:
    """The anchored trajectories: the teacher's greedy replies to the training problems, kept only where the
    verifier accepts them (an anchor is a correct, well-formed reply)."""
    train = lab_tasks.sample_problems(TASK, "train", settings["train_problems"], settings["train_seed"])
    replies = teacher_trajectories(teacher, tokenizer, train, max_new_tokens=settings["max_new_tokens"])
    verdicts = score_samples(train, replies)
    kept = [{"problem": problem, "reply": reply} for problem, reply, verdict in zip(train, replies, verdicts)
            if verdict["correct"] and reply["finish_reason"] == "stop"]
    if not kept:
        raise StageFailedError("the teacher wrote no verified trajectory: nothing to anchor on", stage="route")
    return {"kept": kept, "written": len(train), "verified": len(kept),
            "train_sha256": problems_sha256(train)}


def open_final_set(sink, purpose: str) -> dict:
    """The final held-out split, opened: a read receipt written once under this project's folder, and the
    receipts of earlier openings listed (a second look is never silent)."""
    root = sink.results_root
    folder = root / sink.slug / "heldout_reads"
    earlier = []
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            receipt = json.loads(path.read_text(encoding="utf-8"))
            earlier.append({"path": path.relative_to(root).as_posix(), "reader_label": receipt["run_label"],
                            "created_utc": receipt.get("created_utc")})
    problems = lab_tasks.problems(TASK, FINAL_SPLIT)
    path = folder / f"{sink.slug}_heldout_read_{sink.run_label}.json"
    body = {**sink.header("heldout_read", RECEIPT_SCHEMA), "split": FINAL_SPLIT, "task": TASK,
            "eval_sha256": problems_sha256(problems), "purpose": purpose, "earlier_reads": earlier}
    digest = save_json_record_once(path, body)
    return {"problems": problems, "receipt": {"path": path.relative_to(root).as_posix(), "sha256": digest},
            "earlier_reads": earlier}


def save_candidate(student, folder: Path) -> dict:
    """Seed 1's candidate weights (safetensors) and config, the file a handoff would deploy."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=False)
    save_file({name: tensor.detach().cpu().contiguous() for name, tensor in student.state_dict().items()},
              str(folder / "model.safetensors"))
    student.config.to_json_file(str(folder / "config.json"))
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in ("config.json", "model.safetensors")}


def odd_one_out(per_seed: list) -> dict:
    """One stage's inputs as the comparability check reads them: the first seed's whose inputs differ from
    seed 1's (so a seed that started elsewhere, or read another set, is not hidden behind seed 1), else seed 1's."""
    return next((inputs for inputs in per_seed[1:] if inputs != per_seed[0]), per_seed[0])


def decide(gates, identity: Mapping, stage_inputs: Mapping, baseline: Mapping, results: Mapping,
           thresholds: Mapping) -> tuple:
    """`(comparable, seed_gates, decision)` from the plan's three functions (the learner's in a notebook); an
    error inside one of them fails the stage naming the function (no candidate record, no manifest)."""
    step = "comparability"
    try:
        comparable = gates.comparability(identity["teacher"], identity["student"], copy.deepcopy(dict(stage_inputs)))
        step = "deployment_gates"
        seed_gates = {seed: gates.deployment_gates(
            {"correct": list(baseline["student"]["correct"]), "formatted": list(baseline["student"]["formatted"]),
             "latency_s": baseline["student"]["latency"]["latency_s"]},
            {"correct": list(results[seed]["correct"]), "formatted": list(results[seed]["formatted"]),
             "latency_s": results[seed]["latency"]["latency_s"]},
            results[seed]["teacher_latency"]["latency_s"], dict(thresholds)) for seed in SEEDS}
        step = "terminal_decision"
        decision = gates.terminal_decision(copy.deepcopy(comparable), copy.deepcopy(seed_gates))
    except LEARNER_ERRORS as error:
        raise StageFailedError(f"{step} raised {type(error).__name__}: {error}".splitlines()[0], stage="candidate") \
            from error
    return comparable, seed_gates, check_decision(decision)


def check_decision(decision) -> dict:
    """The terminal decision's result, refused when it is not a decision the stage can act on."""
    if not isinstance(decision, Mapping) or decision.get("decision") not in delivery_gates.DECISIONS \
            or not isinstance(decision.get("open_final_heldout"), bool) or not isinstance(decision.get("write_handoff"), bool):
        raise StageFailedError(f"terminal_decision returned {decision!r}, not a decision with the two flags",
                               stage="candidate")
    return dict(decision)


def checked_options(plan) -> tuple[dict, dict]:
    """The run mode's settings with the plan's route lengths, and the gates' thresholds; ConfigError before any
    work for a route without a step or thresholds the gates cannot read."""
    settings = dict(PLANS[plan.run_mode])
    for key in ("anchored_steps", "distill_steps"):
        value = plan.option(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key} must be an int >= 0, got {value!r}")
            settings[key] = value
    if settings["anchored_steps"] + settings["distill_steps"] < 1:
        raise ConfigError("the route needs at least one step (anchored_steps + distill_steps >= 1)")
    thresholds = plan.option("thresholds") or THRESHOLDS
    try:
        delivery_gates.check_thresholds(dict(thresholds) if isinstance(thresholds, Mapping) else thresholds)
    except ValueError as error:
        raise ConfigError(f"thresholds option: {error}") from None
    return settings, dict(thresholds)


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    import torch

    say = log or (lambda message: None)
    if not plan.writes:
        say(describe(plan.run_mode))
        say(f"functions: {plan.mechanism.sources_line(package_gates())}")
        return
    settings, thresholds = checked_options(plan)
    gates = SimpleNamespace(**{name: plan.mechanism.function(name, getattr(delivery_gates, name))
                               for name in GATE_FUNCTIONS})
    mechanism = plan.mechanism.describe(package_gates())
    sink.require_new(RECORD_STAGES)
    folder = sink.results_root / sink.slug / f"{sink.slug}_candidate_{sink.run_label}"
    if folder.exists():
        raise RecordExistsError(f"{folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    say(describe(plan.run_mode))
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(1)
    try:
        student, teacher, tokenizer, teacher_tokenizer, models = load_pair(plan, settings)
        dev = lab_tasks.problems(TASK, DEV_SPLIT)
        decoding = decoding_of(settings)
        started = time.perf_counter()
        baseline = {"student": evaluate(student, tokenizer, dev, decoding),
                    "teacher": evaluate(teacher, teacher_tokenizer, dev, decoding)}
        baseline["student"]["measured_sha256"] = weights_sha256(student)  # the weights G0 measured
        timed = decode_latency({"student": student, "teacher": teacher}, tokenizer, dev, settings, plan.device)
        for role in ("student", "teacher"):
            baseline[role]["latency"] = timed[role]
        final_identity = lab_tasks.manifest(TASK)["splits"][FINAL_SPLIT]
        baseline_body = {"models": models, "task": lab_tasks.manifest(TASK), "dev_split": DEV_SPLIT,
                         "decoding": decoding, "settings": settings, "baseline": baseline,
                         "final_heldout": {"split": FINAL_SPLIT, **final_identity, "opened": False}}
        baseline_path, _ = sink.save_record("baseline", baseline_body, schema_version=BASELINE_SCHEMA)
        say(f"G0: student {baseline['student']['accuracy']:.3f}, teacher {baseline['teacher']['accuracy']:.3f} on the "
            f"{len(dev)} development problems")
        anchors = anchor_set(teacher, teacher_tokenizer, settings)
        routes, candidates = {}, {}
        for seed in SEEDS:
            candidates[seed], routes[seed] = run_route(student, teacher, tokenizer, settings, seed, anchors["kept"], dev,
                                                       decoding, say)
        route_body = {"settings": settings, "anchors": {key: anchors[key] for key in ("written", "verified",
                                                                                      "train_sha256")},
                      "losses": {"anchored": "forward KL(teacher || student), teacher-written verified trajectories",
                                 "on_policy": "reverse KL(student || teacher), student-sampled replies"},
                      "routes": {str(seed): route for seed, route in routes.items()}}
        route_path, _ = sink.save_record("route", route_body, schema_version=ROUTE_SCHEMA)
        results = {}
        for seed in SEEDS:
            result = evaluate(candidates[seed], tokenizer, dev, decoding)
            timed = decode_latency({"candidate": candidates[seed], "teacher": teacher}, tokenizer, dev, settings,
                                   plan.device)
            result["latency"], result["teacher_latency"] = timed["candidate"], timed["teacher"]
            results[seed] = result
        stage_inputs = {"G0": {"start_sha256": baseline["student"]["measured_sha256"],
                               "eval_sha256": baseline["student"]["eval_sha256"], "decoding": baseline["student"]["decoding"]},
                        "G1": odd_one_out([{"start_sha256": routes[s]["start_sha256"],
                                            "eval_sha256": routes[s]["midpoint"]["eval_sha256"],
                                            "decoding": routes[s]["midpoint"]["decoding"]} for s in SEEDS]),
                        "G2": odd_one_out([{"start_sha256": routes[s]["start_sha256"], "eval_sha256": results[s]["eval_sha256"],
                                            "decoding": results[s]["decoding"]} for s in SEEDS])}
        identity = {role: {key: models[role][key] for key in delivery_gates.MODEL_FIELDS} for role in models}
        comparable, seed_gates, decision = decide(gates, identity, stage_inputs, baseline, results, thresholds)
        effects = {"dev_gain": paired_effect({s: results[s]["accuracy"] for s in SEEDS},
                                             {s: baseline["student"]["accuracy"] for s in SEEDS},
                                             metric="development exact match, candidate minus the G0 student"),
                   "dev_midpoint_gain": paired_effect({s: routes[s]["midpoint"]["accuracy"] for s in SEEDS},
                                                      {s: baseline["student"]["accuracy"] for s in SEEDS},
                                                      metric="development exact match after the anchored steps, "
                                                             "minus the G0 student")}
        candidate_files = save_candidate(candidates[SEEDS[0]], folder)
        final = None
        if decision["open_final_heldout"]:
            opened = open_final_set(sink, "project 88's final report of an accepted candidate")
            measured = {"student": evaluate(student, tokenizer, opened["problems"], decoding),
                        **{str(s): evaluate(candidates[s], tokenizer, opened["problems"], decoding) for s in SEEDS}}
            final = {"receipt": opened["receipt"], "earlier_reads": opened["earlier_reads"],
                     "accuracy": {name: value["accuracy"] for name, value in measured.items()},
                     "format_share": {name: value["format_share"] for name, value in measured.items()},
                     "gain": paired_effect({s: measured[str(s)]["accuracy"] for s in SEEDS},
                                           {s: measured["student"]["accuracy"] for s in SEEDS},
                                           metric="final held-out exact match, candidate minus the G0 student")}
        elapsed = time.perf_counter() - started
    finally:
        torch.set_num_threads(threads)
    candidate_body = {
        "thresholds": thresholds, "stage_inputs": stage_inputs, "identity": identity, "comparability": comparable,
        "candidates": {str(seed): {**results[seed], "gates": seed_gates[seed]} for seed in SEEDS},
        "decision": decision, "effects": effects, "final_heldout": final, "mechanism": mechanism,
        "seconds": elapsed, "lineage": [sink.lineage(baseline_path), sink.lineage(route_path)],
    }
    candidate_path, _ = sink.save_record("candidate", candidate_body, schema_version=CANDIDATE_SCHEMA)
    write_manifest(sink, plan, models, decision, seed_gates, comparable, thresholds, results, baseline, folder,
                   candidate_files, final, [baseline_path, route_path, candidate_path], mechanism)
    say(f"88: {decision['decision']} {decision['reasons'] or ''}; final held-out "
        f"{'opened once' if final else 'still closed'}")


def package_gates() -> dict:
    return {name: getattr(delivery_gates, name) for name in GATE_FUNCTIONS}


def write_manifest(sink, plan, models, decision, seed_gates, comparable, thresholds, results, baseline, folder,
                   candidate_files, final, evidence, mechanism) -> None:
    """The sealed manifest (always) and, only when the decision says so, the sealed deployment handoff."""
    root = sink.results_root
    relative = folder.relative_to(root).as_posix()
    outputs = [{"role": stage, **sink.lineage(path)} for stage, path in zip(("baseline", "route", "candidate"), evidence)]
    outputs += [{"role": f"candidate/{name}", "path": f"{relative}/{name}", "sha256": digest}
                for name, digest in sorted(candidate_files.items())]
    handoff = None
    if decision["write_handoff"]:
        body = {**sink.header("handoff", HANDOFF_SCHEMA),
                "deploy": {"weights": f"{relative}/model.safetensors", "config": f"{relative}/config.json",
                           "files": candidate_files, "seed": SEEDS[0], "tokenizer_of": models["student"]["model_id"],
                           "tokenizer_sha256": models["student"]["tokenizer_sha256"]},
                "teacher": models["teacher"], "student_start": models["student"], "final_heldout": final,
                "decision": decision["decision"]}
        ref = sink.save(sink.record_path("handoff"), seal(body), stage="handoff")
        handoff = {"path": ref.path.relative_to(root).as_posix(), "sha256": ref.sha256}
        outputs.append({"role": "deployment_handoff", **handoff})
    gates = [{"name": "comparability", "threshold": "same tokenizer family, common student start, same development "
              "set and decoding for G0/G1/G2", "measured": comparable["findings"], "passed": comparable["comparable"]}]
    gates += [{**gate, "name": f"seed_{seed}:{gate['name']}"} for seed in SEEDS for gate in seed_gates[seed]["gates"]]
    body = {
        "inputs": [],
        "models": {"teacher": models["teacher"], "student_start": models["student"]},
        "candidates": [{"name": f"seed_{seed}", "deployable": seed == SEEDS[0], "dev_accuracy": results[seed]["accuracy"],
                        "qualifies": seed_gates[seed]["qualifies"]} for seed in SEEDS],
        "baseline": {"student_dev_accuracy": baseline["student"]["accuracy"],
                     "teacher_dev_accuracy": baseline["teacher"]["accuracy"]},
        "gates": gates,
        "thresholds": thresholds,
        "decision": {"decision": decision["decision"], "reasons": decision["reasons"],
                     "qualifying_seeds": decision["qualifying_seeds"]},
        "next_action": decision["next_action"] if isinstance(decision.get("next_action"), str)
        else delivery_gates.NEXT_ACTIONS[decision["decision"]],
        "final_heldout": {"opened": final is not None,
                          "receipt": None if final is None else final["receipt"]},
        "handoff": handoff,
        "outputs": outputs,
        "mechanism": mechanism,
    }
    check_manifest_body(body)
    record = {**sink.header("manifest", MANIFEST_SCHEMA), "runtime": sink.runtime(), **body}
    sink.save(sink.record_path("manifest"), seal(record), stage="manifest")

