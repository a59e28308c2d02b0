"""PT-REWARD-MODEL's stage: a reward model trained on correct labels against a mislabelled control.

Preference pairs come from the plan's model's own samples: for a lab problem, a reply the verifier
accepts is chosen (the model's own correct answer where one of its samples had it, else the label) and
the same integer wrapped in words is rejected. Training, calibration and hidden pairs come from the lab
task's train, validation and heldout splits (disjoint problems); the hidden pairs' rejected replies use wrapping templates that no training or calibration
pair uses (so the hidden accuracy measures what the reward model learned about the format, not which
five sentences it saw), and the same hidden pairs are scored once more with the training templates, so
the record says what the template overlap adds. Two reward models start from the same weights
(transformers' sequence-classification head on the plan's model): the candidate trains on the correct
labels, the control on the same pairs with half of them swapped. Each fits its temperature on the
calibration pairs (both orders of each pair) and reports its calibration error on the hidden pairs,
which the fit never saw; the gate compares the candidate with the control. Rewards are read where
transformers' forward reads them (`heads.readout_mask`). The loss, the calibration and the gate are the
plan's mechanism (the chapter's exercise functions when the notebook passes them, else the package's).
Every seed runs the whole comparison; the record keeps every number, the paired effect over the seeds
(`tools.core.effects`) and the decision computed from them.
"""

from __future__ import annotations

import random

from tools.core import effects
from tools.core.numerics import cpu_numerics
from tools.data import lab_tasks
from tools.experiments.reward import bradley_terry, rollouts
from tools.experiments.reward.heads import conversation_ids, load_reward_model, pad_rows, readout_mask, token_scores
from tools.experiments.reward.rollouts import pool_sha256
from tools.experiments.reward.stage import cpu_threads, load_policy, memory_watch
from tools.models.loading import resolve_model

STAGE = "train_and_gate"
SCHEMA = "reward-model-gate/v2"
TASK, TASK_SEED = lab_tasks.PRETRAINING_TASK, 1401
SPLIT = {"train": 16, "calibration": 16, "hidden": 64}
"""Pairs per seed in every run mode. The original course (seed 001) used 6 training, 4 calibration and 4 hidden
pairs; with 4 hidden pairs one pair moves an accuracy by 0.25, the gate's whole gap, so a decision would rest on
one pair. With 64 one pair is 1/64."""
SPLIT_OF = {"train": "train", "calibration": "validation", "hidden": "heldout"}
"""The lab task's split each kind of pair draws its problems from (disjoint by content hash)."""
DEFAULT_SEEDS = (0, 1, 2)
SAMPLES_PER_TASK, MAX_NEW_TOKENS = 4, 6
TRAIN_STEPS, LEARNING_RATE = 40, 1e-3
TEMPERATURES = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
MIN_GAP, MAX_ECE = 0.25, 0.2
TRAINED = ("model", "score")
"""The parameters the reward models train: all of them, backbone and score head (with the head alone,
the lab model's candidate reached only 0.56-0.84 hidden accuracy over three seeds)."""

TRAIN_TEMPLATES = ("The answer is {n}.", "{n} is the result", "Result: {n}", "I think it is {n}")
HIDDEN_TEMPLATES = ("It equals {n}", "{n}, done", "Sum = {n}", "My answer: {n}!")
"""How a rejected reply breaks the strict verifier's format: the same integer, wrapped in words. Training
and calibration pairs use the first four, hidden pairs only the last four."""
MECHANISM = ("pairwise_reward_loss", "calibrate_temperature", "reward_model_gate")


def reward_model_gate(candidate: dict, control: dict, min_gap: float = MIN_GAP, max_ece: float = MAX_ECE) -> dict:
    """The chapter's gate (TODO 3's contract, without its input checks): the candidate's hidden accuracy
    minus the control's, then the reasons no_gap_over_control, not_above_chance, poorly_calibrated."""
    gap = float(candidate["hidden_accuracy"] - control["hidden_accuracy"])
    reasons = []
    if gap < min_gap - 1e-9:
        reasons.append("no_gap_over_control")
    if candidate["hidden_accuracy"] <= 0.5:
        reasons.append("not_above_chance")
    if candidate["ece_after"] > max_ece:
        reasons.append("poorly_calibrated")
    rejected = {"no_gap_over_control", "not_above_chance"} & set(reasons)
    return {"gap": gap, "reasons": reasons, "decision": "reject" if rejected else "tune" if reasons else "accept_mechanism"}


PACKAGE_FUNCTIONS = {"pairwise_reward_loss": bradley_terry.reward_loss, "calibrate_temperature": bradley_terry.fit_temperature,
                     "reward_model_gate": reward_model_gate}
"""The package's copies of the chapter's three exercise functions (a run without a notebook uses them)."""


def preference_pairs(model, tokenizer, tasks, seed: int, templates=TRAIN_TEMPLATES) -> list[dict]:
    """One pair per task: chosen, a reply in the verifier's format (the model's own correct answer where
    one of its samples had it, else the label); rejected, the same integer wrapped in one of `templates`,
    which the strict verifier refuses (a format preference: the lab model's states carry no linear trace
    of whether a sum is right, see the chapter's Step 5)."""
    sampled = rollouts.generate(model, tokenizer, [task for task in tasks for _ in range(SAMPLES_PER_TASK)],
                                max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=seed)
    rng = random.Random(seed)
    pairs = []
    for index, task in enumerate(tasks):
        answers = list(zip(sampled.texts[index * SAMPLES_PER_TASK:(index + 1) * SAMPLES_PER_TASK],
                           sampled.correct[index * SAMPLES_PER_TASK:(index + 1) * SAMPLES_PER_TASK]))
        right = [text for text, ok in answers if ok]
        chosen = right[0] if right else str(task.label)
        rejected = rng.choice(templates).format(n=task.label)
        pairs.append({"task_id": f"{task.task}-{task.a}-{task.b}", "prompt": task.prompt, "chosen": chosen,
                      "rejected": rejected, "chosen_sampled": bool(right), "label": task.label})
    return pairs


def rewrapped(pairs: list[dict], templates, seed: int) -> list[dict]:
    """The same pairs with each rejected reply wrapped by one of `templates` instead."""
    rng = random.Random(seed)
    return [{**pair, "rejected": rng.choice(templates).format(n=pair["label"])} for pair in pairs]


def _scores(model, tokenizer, prompts, answers):
    """The head's score at every position of `prompt + answer` (right-padded) and the readout mask."""
    ids, mask = pad_rows([conversation_ids(tokenizer, p, a) for p, a in zip(prompts, answers)], tokenizer.pad_token_id,
                         "right")
    device = next(model.parameters()).device
    scores = token_scores(model, ids.to(device), mask.to(device))
    return scores, readout_mask(ids, tokenizer.pad_token_id).to(device)


def pair_loss(model, tokenizer, pairs: list[dict], loss_function, flipped: set[int] = frozenset()) -> dict:
    """`loss_function` (TODO 1's contract) on `pairs`, the pairs in `flipped` swapped."""
    prompts = [pair["prompt"] for pair in pairs]
    chosen = [pair["rejected"] if i in flipped else pair["chosen"] for i, pair in enumerate(pairs)]
    rejected = [pair["chosen"] if i in flipped else pair["rejected"] for i, pair in enumerate(pairs)]
    chosen_scores, chosen_mask = _scores(model, tokenizer, prompts, chosen)
    rejected_scores, rejected_mask = _scores(model, tokenizer, prompts, rejected)
    return loss_function(chosen_scores, chosen_mask, rejected_scores, rejected_mask)


def train_reward_model(model, tokenizer, pairs: list[dict], flipped: set[int], seed: int, loss_function=None) -> list[float]:
    """Bradley-Terry training of the trained parameters on `pairs` (the pairs in `flipped` swapped) with
    `loss_function` (the package's by default); returns the loss of every step."""
    import torch

    loss_function = loss_function or bradley_terry.reward_loss
    torch.manual_seed(seed)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.split(".")[0] in TRAINED)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    losses = []
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = pair_loss(model, tokenizer, pairs, loss_function, flipped)["loss"]
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def evaluate(model, tokenizer, calibration: list[dict], hidden: list[dict], hidden_seen: list[dict],
             functions=None) -> dict:
    """Margins (chosen minus rejected reward) on the calibration and hidden pairs; the temperature fitted on
    the calibration pairs (both orders of each pair); the calibration error at temperature 1 and at the
    fitted one measured on the hidden pairs (both orders), which the fit never saw; the hidden accuracy
    with unseen templates (the claim) and with the training templates (the overlap)."""
    import torch

    functions = functions or PACKAGE_FUNCTIONS
    model.eval()
    with torch.no_grad():
        def margins(pairs):
            read = pair_loss(model, tokenizer, pairs, functions["pairwise_reward_loss"])
            return (read["chosen_rewards"] - read["rejected_rewards"]).double().cpu().tolist()

        calibration_margins, hidden_margins, seen_margins = margins(calibration), margins(hidden), margins(hidden_seen)

    def both_orders(values):
        return values + [-value for value in values], [True] * len(values) + [False] * len(values)

    fitted = functions["calibrate_temperature"](*both_orders(calibration_margins), list(TEMPERATURES))
    on_hidden = functions["calibrate_temperature"](*both_orders(hidden_margins), [fitted["temperature"]])
    return {"calibration": fitted,
            "hidden_calibration": {"temperature": fitted["temperature"], "ece_before": on_hidden["ece_before"],
                                   "ece_after": on_hidden["ece_after"], "nll_before": on_hidden["nll_before"],
                                   "nll_after": on_hidden["nll_after"]},
            "calibration_margins": calibration_margins, "hidden_margins": hidden_margins, "hidden_pairs": len(hidden),
            "hidden_accuracy": sum(margin > 0 for margin in hidden_margins) / len(hidden),
            "hidden_accuracy_training_templates": sum(margin > 0 for margin in seen_margins) / len(hidden_seen)}


def gate_inputs(evaluation: dict) -> dict:
    """What the gate reads of one reward model: hidden accuracy, hidden pairs, ECE on the hidden pairs."""
    return {"hidden_accuracy": evaluation["hidden_accuracy"], "hidden_pairs": evaluation["hidden_pairs"],
            "ece_after": evaluation["hidden_calibration"]["ece_after"]}


def measure_seed(plan, seed: int, sizes: dict, functions: dict, say) -> dict:
    """One seed: the model's own pairs, the candidate and the control trained and evaluated, the gate."""
    tasks = {name: lab_tasks.sample_problems(TASK, SPLIT_OF[name], sizes[name], TASK_SEED + seed) for name in SPLIT}
    policy, tokenizer, identity = load_policy(plan)
    train = preference_pairs(policy, tokenizer, tasks["train"], seed)
    calibration = preference_pairs(policy, tokenizer, tasks["calibration"], seed + 7919)
    hidden = preference_pairs(policy, tokenizer, tasks["hidden"], seed + 104729, HIDDEN_TEMPLATES)
    del policy
    hidden_seen = rewrapped(hidden, TRAIN_TEMPLATES, seed + 1299709)
    flipped = set(random.Random(seed + 1).sample(range(len(train)), len(train) // 2))
    folder = resolve_model(plan.model, source=plan.model_source, cache_dir=plan.model_cache)
    entry = {"seed": seed, "model": identity, "task_pool_sha256": {name: pool_sha256(tasks[name]) for name in SPLIT},
             "pairs": {"train": train, "calibration": calibration, "hidden": hidden, "flipped": sorted(flipped),
                       "sampled_chosen": sum(pair["chosen_sampled"] for pair in train + calibration + hidden)}}
    for name, swap in (("candidate", set()), ("control", flipped)):
        model, reward_tokenizer = load_reward_model(folder, seed=seed, device=plan.device)
        losses = train_reward_model(model, reward_tokenizer, train, swap, seed, functions["pairwise_reward_loss"])
        entry[name] = {"train_losses": losses,
                       **evaluate(model, reward_tokenizer, calibration, hidden, hidden_seen, functions)}
        del model
    entry["gate"] = functions["reward_model_gate"](gate_inputs(entry["candidate"]), gate_inputs(entry["control"]),
                                                   MIN_GAP, MAX_ECE)
    say(f"reward_model seed {seed}: candidate {entry['candidate']['hidden_accuracy']:.3f}, control "
        f"{entry['control']['hidden_accuracy']:.3f} -> {entry['gate']['decision']}")
    return entry


def paired_effects(per_seed: list[dict]) -> dict | None:
    """Paired over the seeds (None with fewer than two): the candidate's hidden accuracy minus the
    control's (unseen templates, the claim), the same on the training templates, and the candidate's
    accuracy on unseen minus seen templates (what the overlap adds)."""
    if len(per_seed) < 2:
        return None

    def of(name, key):
        return {entry["seed"]: entry[name][key] for entry in per_seed}

    return {"candidate_over_control": effects.paired_effect(of("candidate", "hidden_accuracy"),
                                                            of("control", "hidden_accuracy"),
                                                            metric="hidden-pair accuracy, unseen templates"),
            "candidate_over_control_training_templates": effects.paired_effect(
                of("candidate", "hidden_accuracy_training_templates"), of("control", "hidden_accuracy_training_templates"),
                metric="hidden-pair accuracy, training templates"),
            "unseen_over_seen_templates": effects.paired_effect(
                of("candidate", "hidden_accuracy"), of("candidate", "hidden_accuracy_training_templates"),
                metric="candidate's hidden-pair accuracy")}


def decide(per_seed: list[dict]) -> dict:
    """From the gate of every seed: reject when it rejects on some seed, tune when it asks for tuning on
    some seed, else accept_mechanism."""
    verdicts = [entry["gate"]["decision"] for entry in per_seed]
    for decision in ("reject", "tune"):
        seeds = [entry["seed"] for entry, verdict in zip(per_seed, verdicts) if verdict == decision]
        if seeds:
            return {"decision": decision, "reason": f"the gate says {decision} on seeds {seeds}"}
    return {"decision": "accept_mechanism", "reason": f"the gate accepts the candidate on each of {len(per_seed)} seed(s)"}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda _: None)
    seeds = plan.seeds or DEFAULT_SEEDS
    sizes = {name: plan.option(f"{name}_pairs") or size for name, size in SPLIT.items()}
    sink.require_new([STAGE])
    if not plan.writes:
        say(f"reward_model (dry_run): seeds {list(seeds)}, each {sizes['train']} training, {sizes['calibration']} "
            f"calibration and {sizes['hidden']} hidden pairs (hidden pairs with unseen templates) from {plan.model} "
            f"({plan.model_source}, {plan.device}); candidate vs a 50% mislabelled control; functions "
            f"{plan.mechanism.sources_line(PACKAGE_FUNCTIONS)}; nothing is loaded or written")
        return
    import torch

    from tools.measure.training import run_with_oom_guard

    functions = {name: plan.mechanism.function(name, PACKAGE_FUNCTIONS[name]) for name in MECHANISM}
    per_seed: list[dict] = []

    def measure() -> dict:
        for seed in seeds:
            per_seed.append(measure_seed(plan, seed, sizes, functions, say))
        return {"status": "ok"}

    with memory_watch(plan) as memory, cpu_threads(plan):
        outcome = run_with_oom_guard(measure, torch_module=torch)
    ok = outcome["status"] == "ok"
    body = {"measurement": "Bradley-Terry reward models on the plan's model's own answers: correct labels vs a 50% "
                           "mislabelled control, temperature fitted on calibration pairs, accuracy and calibration "
                           "error measured on hidden pairs whose rejected templates no training pair used",
            "status": outcome["status"], "error": outcome.get("error"), "plan": plan.public(),
            "mechanism": plan.mechanism.describe(PACKAGE_FUNCTIONS),
            "model": per_seed[0]["model"] if per_seed else None, "seeds": list(seeds), "cpu_numerics": cpu_numerics(),
            "settings": {"split": sizes, "train_steps": TRAIN_STEPS, "learning_rate": LEARNING_RATE,
                         "trained": list(TRAINED), "temperatures": TEMPERATURES, "min_gap": MIN_GAP, "max_ece": MAX_ECE,
                         "train_templates": list(TRAIN_TEMPLATES), "hidden_templates": list(HIDDEN_TEMPLATES)},
            "per_seed": per_seed, "effects": paired_effects(per_seed) if ok else None, "memory": memory,
            "decision": decide(per_seed) if ok else {"decision": "reject", "reason": outcome["status"]}}
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    say(f"reward_model: wrote {path.name} (sha256 {digest[:12]}), decision {body['decision']['decision']}")
