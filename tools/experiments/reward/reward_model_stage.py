"""PT-REWARD-MODEL's stage: a reward model trained on correct labels against a mislabelled control.

Preference pairs come from the plan's model's own samples: for a lab problem, a response the
verifier accepts is chosen and one it rejects is rejected (where the model produced only one kind,
the missing side is written from the label: the label itself, or the label off by a small amount;
the record counts both kinds). The pairs are split into training, calibration and hidden pairs. Two
reward models start from the same weights (transformers' sequence-classification head on the plan's
model): the candidate trains on the correct labels, the control on the same pairs with half of them
swapped. Each is calibrated on the calibration pairs (both orders of each pair), measured on the
hidden pairs, and the gate compares the candidate with the control. The record keeps every number
and the decision computed from them.
"""

from __future__ import annotations

import random

from tools.data import lab_tasks
from tools.experiments.reward import bradley_terry, rollouts
from tools.experiments.reward.heads import conversation_ids, load_reward_model, pad_rows, token_scores
from tools.experiments.reward.masks import read_last
from tools.experiments.reward.rollouts import pool_sha256
from tools.experiments.reward.stage import cpu_threads, load_policy, memory_watch
from tools.models.loading import resolve_model

STAGE = "train_and_gate"
SCHEMA = "reward-model-gate/v1"
TASK, TASK_SEED = lab_tasks.PRETRAINING_TASK, 1401
SPLIT = {"train": 6, "calibration": 4, "hidden": 4}
"""The original course's sizes (seed 001): 6 training, 4 calibration and 4 hidden preference pairs."""
SAMPLES_PER_TASK, MAX_NEW_TOKENS = 4, 6
TRAIN_STEPS, LEARNING_RATE = 40, 1e-3
TEMPERATURES = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
MIN_GAP, MAX_ECE = 0.25, 0.2
TRAINED = ("model", "score")
"""The parameters the reward models train: all of them, backbone and score head (with the head alone,
the lab model's candidate reached only 0.56-0.84 hidden accuracy over three seeds)."""


FORMAT_BREAKS = ("The answer is {n}.", "{n} is the result", "Result: {n}", "I think it is {n}", "{n}, done")
"""How a rejected reply breaks the strict verifier's format: the same integer, wrapped in words."""


def preference_pairs(model, tokenizer, tasks, seed: int) -> list[dict]:
    """One pair per task: chosen, a reply in the verifier's format (the model's own correct answer
    where one of its samples had it, else the label); rejected, the same integer wrapped in words,
    which the strict verifier refuses (a format preference: the lab model's states carry no linear
    trace of whether a sum is right, see the chapter's Step 5)."""
    sampled = rollouts.generate(model, tokenizer, [task for task in tasks for _ in range(SAMPLES_PER_TASK)],
                                max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=seed)
    rng = random.Random(seed)
    pairs = []
    for index, task in enumerate(tasks):
        answers = list(zip(sampled.texts[index * SAMPLES_PER_TASK:(index + 1) * SAMPLES_PER_TASK],
                           sampled.correct[index * SAMPLES_PER_TASK:(index + 1) * SAMPLES_PER_TASK]))
        right = [text for text, ok in answers if ok]
        chosen = right[0] if right else str(task.label)
        rejected = rng.choice(FORMAT_BREAKS).format(n=task.label)
        pairs.append({"task_id": f"{task.task}-{task.a}-{task.b}", "prompt": task.prompt, "chosen": chosen,
                      "rejected": rejected, "chosen_sampled": bool(right)})
    return pairs


def _rewards(model, tokenizer, prompts, answers):
    ids, mask = pad_rows([conversation_ids(tokenizer, p, a) for p, a in zip(prompts, answers)], tokenizer.pad_token_id,
                         "right")
    device = next(model.parameters()).device
    mask = mask.to(device)
    return read_last(token_scores(model, ids.to(device), mask), mask)


def train_reward_model(model, tokenizer, pairs: list[dict], flipped: set[int], seed: int) -> list[float]:
    """Bradley-Terry training of the trained parameters on `pairs` (the pairs in `flipped` swapped);
    returns the loss of every step."""
    import torch

    torch.manual_seed(seed)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.split(".")[0] in TRAINED)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    chosen = [pair["rejected"] if i in flipped else pair["chosen"] for i, pair in enumerate(pairs)]
    rejected = [pair["chosen"] if i in flipped else pair["rejected"] for i, pair in enumerate(pairs)]
    prompts = [pair["prompt"] for pair in pairs]
    losses = []
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = bradley_terry.pairwise_loss(_rewards(model, tokenizer, prompts, chosen),
                                           _rewards(model, tokenizer, prompts, rejected))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def evaluate(model, tokenizer, calibration: list[dict], hidden: list[dict]) -> dict:
    """Calibration on both orders of each calibration pair, then hidden-pair ranking accuracy."""
    import torch

    model.eval()
    with torch.no_grad():
        def margins(pairs):
            prompts = [pair["prompt"] for pair in pairs]
            return (_rewards(model, tokenizer, prompts, [p["chosen"] for p in pairs])
                    - _rewards(model, tokenizer, prompts, [p["rejected"] for p in pairs])).double().cpu().tolist()

        calibration_margins = margins(calibration)
        hidden_margins = margins(hidden)
    both_orders = calibration_margins + [-margin for margin in calibration_margins]
    labels = [True] * len(calibration_margins) + [False] * len(calibration_margins)
    fitted = bradley_terry.fit_temperature(both_orders, labels, TEMPERATURES)
    return {"calibration": fitted, "hidden_margins": hidden_margins, "hidden_pairs": len(hidden),
            "hidden_accuracy": sum(margin > 0 for margin in hidden_margins) / len(hidden)}


def gate(candidate: dict, control: dict) -> dict:
    """The chapter's gate on the two evaluations: the gap over the control, chance, calibration."""
    gap = candidate["hidden_accuracy"] - control["hidden_accuracy"]
    reasons = []
    if gap < MIN_GAP - 1e-9:
        reasons.append("no_gap_over_control")
    if candidate["hidden_accuracy"] <= 0.5:
        reasons.append("not_above_chance")
    if candidate["calibration"]["ece_after"] > MAX_ECE:
        reasons.append("poorly_calibrated")
    rejected = {"no_gap_over_control", "not_above_chance"} & set(reasons)
    return {"gap": gap, "reasons": reasons, "min_gap": MIN_GAP, "max_ece": MAX_ECE,
            "decision": "reject" if rejected else "tune" if reasons else "accept_mechanism"}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda _: None)
    seed = plan.seeds[0] if plan.seeds else 0
    sizes = {name: plan.option(f"{name}_pairs") or size for name, size in SPLIT.items()}
    tasks = lab_tasks.sample_problems(TASK, "train", sum(sizes.values()), TASK_SEED + seed)
    sink.require_new([STAGE])
    if not plan.writes:
        say(f"reward_model (dry_run): {sizes['train']} training, {sizes['calibration']} calibration and "
            f"{sizes['hidden']} hidden pairs from {plan.model} ({plan.model_source}, {plan.device}); candidate vs a "
            "50% mislabelled control; nothing is loaded or written")
        return
    import torch

    from tools.measure.training import run_with_oom_guard

    found: dict = {}

    def measure() -> dict:
        policy, tokenizer, found["model"] = load_policy(plan)
        pairs = preference_pairs(policy, tokenizer, tasks, seed)
        del policy
        train = pairs[:sizes["train"]]
        calibration = pairs[sizes["train"]:sizes["train"] + sizes["calibration"]]
        hidden = pairs[sizes["train"] + sizes["calibration"]:]
        flipped = set(random.Random(seed + 1).sample(range(len(train)), len(train) // 2))
        folder = resolve_model(plan.model, source=plan.model_source, cache_dir=plan.model_cache)
        found["pairs"] = {"train": train, "calibration": calibration, "hidden": hidden, "flipped": sorted(flipped),
                          "sampled_chosen": sum(pair["chosen_sampled"] for pair in pairs)}
        for name, swap in (("candidate", set()), ("control", flipped)):
            model, tokenizer = load_reward_model(folder, seed=seed, device=plan.device)
            losses = train_reward_model(model, tokenizer, train, swap, seed)
            found[name] = {"train_losses": losses, **evaluate(model, tokenizer, calibration, hidden)}
            del model
        return {"status": "ok"}

    with memory_watch(plan) as memory, cpu_threads(plan):
        outcome = run_with_oom_guard(measure, torch_module=torch)
    ok = outcome["status"] == "ok"
    body = {"measurement": "Bradley-Terry reward models on the plan's model's own answers: correct labels vs a 50% "
                           "mislabelled control, calibrated, measured on hidden pairs",
            "status": outcome["status"], "error": outcome.get("error"), "plan": plan.public(), "model": found.get("model"),
            "seed": seed, "settings": {"split": sizes, "train_steps": TRAIN_STEPS, "learning_rate": LEARNING_RATE,
                                       "trained": list(TRAINED), "temperatures": TEMPERATURES,
                                       "task_pool_sha256": pool_sha256(tasks)},
            "pairs": found.get("pairs"), "candidate": found.get("candidate"), "control": found.get("control"),
            "memory": memory,
            "decision": gate(found["candidate"], found["control"]) if ok else {"decision": "reject",
                                                                                 "reason": outcome["status"]}}
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    say(f"reward_model: wrote {path.name} (sha256 {digest[:12]}), decision {body['decision']['decision']}")
