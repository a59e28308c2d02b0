"""PT-REWARD-SIGNAL's stage: six reward-signal settings on real rollouts of the plan's model.

The reference is the loaded model, frozen. The policy is the same model after a few supervised
steps on its own correct answers (a policy part-way through training, so the KL to the reference is
not zero). The policy samples responses to lab problems; the verifier scores them; a value model
(the policy's backbone with a linear head fitted by ridge regression to the observed returns of a
separate batch) gives V. Each candidate setting builds token rewards, GAE advantages and the
diagnostic gate from the same tensors; verl 0.9.1's KL penalty and GAE are run on them too. The
stage decision is computed from the candidates: accept_mechanism when the baseline setting is
accepted and both control settings are rejected.
"""

from __future__ import annotations

from tools.data import lab_tasks
from tools.experiments.reward import rollouts, signals
from tools.experiments.reward.rollouts import pool_sha256
from tools.experiments.reward.stage import cpu_threads, load_policy, memory_watch

STAGE = "signal_matrix"
SCHEMA = "reward-signal-matrix/v1"
TASK, TASK_SEED, TASK_COUNT, SAMPLES_PER_TASK = lab_tasks.PRETRAINING_TASK, 1501, 16, 4
VALUE_TASK_COUNT = 16
MAX_NEW_TOKENS = 6
MAX_KL_SHARE = 0.5
DRIFT_STEPS, DRIFT_LR = 3, 1e-3

CANDIDATES = {
    "kl0.05_gae": {"kl_coef": 0.05, "estimator": "k1", "reward": "verifier", "values": "value_model", "gamma": 1.0, "lam": 0.95},
    "kl0_gae": {"kl_coef": 0.0, "estimator": "k1", "reward": "verifier", "values": "value_model", "gamma": 1.0, "lam": 0.95},
    "kl0.05_monte_carlo": {"kl_coef": 0.05, "estimator": "k1", "reward": "verifier", "values": "value_model", "gamma": 1.0,
                           "lam": 1.0},
    "kl0.05_discount0.9": {"kl_coef": 0.05, "estimator": "k1", "reward": "verifier", "values": "value_model",
                           "gamma": 0.9, "lam": 0.95},
    "kl20_k3_gae": {"kl_coef": 20.0, "estimator": "k3", "reward": "verifier", "values": "value_model", "gamma": 1.0,
                    "lam": 0.95},
    "no_reward_no_baseline": {"kl_coef": 0.0, "estimator": "k1", "reward": "none", "values": "zero", "gamma": 1.0,
                              "lam": 0.95},
}
"""Six settings varying the KL constraint, the terminal reward and the return. The baseline is the
first; the last two are controls the gate must reject (a KL term that drowns the score, and a signal
with no reward and no baseline, whose advantages are all zero)."""
BASELINE, CONTROLS = "kl0.05_gae", ("kl20_k3_gae", "no_reward_no_baseline")


def drifted_policy(model, tokenizer, tasks, seed: int):
    """A copy of `model` after DRIFT_STEPS supervised AdamW steps on its own correct answers (or the
    labels, where it had none), so that its KL to the frozen original is not zero."""
    import copy

    import torch

    policy = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=DRIFT_LR, weight_decay=0.0)
    sampled = rollouts.generate(policy, tokenizer, tasks, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=seed)
    policy.train()
    for _ in range(DRIFT_STEPS):
        optimizer.zero_grad(set_to_none=True)
        log_probs = rollouts.response_log_probs(policy, sampled)
        weights = sampled.scores.to(log_probs.device).unsqueeze(1) * sampled.response_mask.to(log_probs.device)
        if float(weights.sum()) == 0:
            weights = sampled.response_mask.to(log_probs.device).float()
        (-(log_probs * weights).sum() / weights.sum()).backward()
        optimizer.step()
    return policy.eval()


def fit_value_head(value_model, batch, returns, ridge: float = 1e-2) -> None:
    """Set the value head by ridge regression of `returns` on the backbone's states at the valid
    response positions of `batch` (closed form, float64)."""
    import torch

    with torch.no_grad():
        device = next(value_model.parameters()).device
        hidden = value_model.backbone(input_ids=batch.sequences.to(device), attention_mask=batch.attention_mask.to(device),
                                      position_ids=batch.position_ids.to(device)).last_hidden_state
        start = batch.prompt_width - 1
        states = hidden[:, start:start + batch.response_mask.shape[1]].double().cpu()
        valid = batch.response_mask.bool()
        features = torch.cat([states[valid], torch.ones(int(valid.sum()), 1, dtype=torch.float64)], dim=1)
        targets = returns[valid].double()
        gram = features.T @ features + ridge * torch.eye(features.shape[1], dtype=torch.float64)
        solution = torch.linalg.solve(gram, features.T @ targets)
        value_model.head.weight.copy_(solution[:-1].to(value_model.head.weight.dtype)[None])
        value_model.head.bias.copy_(solution[-1:].to(value_model.head.bias.dtype))


def candidate_signal(name: str, setting: dict, batch, log_probs, ref_log_probs, values) -> dict:
    """One setting's token rewards, GAE, whitened advantages and gate, with what the record keeps."""
    import torch

    mask = batch.response_mask
    scores = batch.scores.double() if setting["reward"] == "verifier" else torch.zeros(len(batch.problems), dtype=torch.float64)
    baseline = values if setting["values"] == "value_model" else torch.zeros_like(values)
    shaped = signals.token_rewards(scores, log_probs, ref_log_probs, mask, setting["kl_coef"], setting["estimator"])
    estimate = signals.gae(shaped["rewards"], baseline, mask, setting["gamma"], setting["lam"])
    whitened = signals.masked_whiten(estimate["advantages"], mask)
    verdict = signals.gate(estimate["advantages"], mask, shaped["kl"], setting["kl_coef"], scores, MAX_KL_SHARE)
    valid = mask.bool()
    return {"name": name, "setting": dict(setting), "mean_kl": shaped["mean_kl"], **verdict,
            "advantage_mean": float(estimate["advantages"][valid].mean()),
            "advantage_std": float(estimate["advantages"][valid].std()),
            "advantage_abs_max": float(estimate["advantages"][valid].abs().max()),
            "whitened_first_response": [round(float(value), 6) for value in whitened[0][valid[0]]],
            "return_mean": float(estimate["returns"][valid].mean())}


def verl_agreement(batch, log_probs, ref_log_probs, values) -> dict:
    """verl's KL penalty and GAE on this stage's own tensors (float64), against `signals`; where verl or
    its runtime dependencies are not installed (the GPU image has neither verl nor ray), the numbers
    are None and the reason says so."""
    from tools.experiments.reward import verl_reference

    try:
        verl_reference.core_algos()
    except ImportError as error:
        return {"verl": None, "rewards_max_abs_diff": None, "whitened_max_abs_diff": None, "returns_max_abs_diff": None,
                "not_measured": f"verl could not be imported here ({type(error).__name__}: {error})"}
    mask = batch.response_mask
    valid = mask.bool()
    scores = batch.scores.double()
    ours = signals.token_rewards(scores, log_probs, ref_log_probs, mask, 0.05, "k1")
    verl_rewards, _ = verl_reference.kl_token_rewards(scores, log_probs, ref_log_probs, mask, 0.05, "k1")
    estimate = signals.gae(ours["rewards"], values, mask, 1.0, 0.95)
    verl_advantages, verl_returns = verl_reference.gae(ours["rewards"], values, mask, 1.0, 0.95)
    return {"verl": verl_reference.version(),
            "rewards_max_abs_diff": float((ours["rewards"] - verl_rewards).abs().max()),
            "whitened_max_abs_diff": float((signals.masked_whiten(estimate["advantages"], mask) - verl_advantages)[valid]
                                           .abs().max()),
            "returns_max_abs_diff": float((estimate["returns"] - verl_returns)[valid].abs().max())}


def decide(candidates: list[dict]) -> dict:
    """accept_mechanism when the baseline is accepted and every control rejected, else reject."""
    by_name = {item["name"]: item for item in candidates}
    ok = by_name[BASELINE]["decision"] == "accept" and all(by_name[name]["decision"] == "reject" for name in CONTROLS)
    return {"decision": "accept_mechanism" if ok else "reject",
            "reason": ("the gate accepts the baseline and rejects both controls" if ok else
                       "the gate does not separate the baseline from the controls")}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda _: None)
    seed = plan.seeds[0] if plan.seeds else 0
    drawn = lab_tasks.sample_problems(TASK, "train", TASK_COUNT + VALUE_TASK_COUNT, TASK_SEED)
    tasks, value_tasks = drawn[:TASK_COUNT], drawn[TASK_COUNT:]
    sink.require_new([STAGE])
    if not plan.writes:
        say(f"reward_signal (dry_run): {len(tasks)} tasks x {SAMPLES_PER_TASK} samples from {plan.model} "
            f"({plan.model_source}, {plan.device}); six candidate settings {', '.join(CANDIDATES)}; nothing is loaded "
            "or written")
        return
    import torch

    from tools.experiments.reward.value_model import ValueModel, frozen_copy
    from tools.measure.training import run_with_oom_guard

    torch.manual_seed(seed)
    found: dict = {}

    def measure() -> dict:
        model, tokenizer, found["model"] = load_policy(plan)
        reference = frozen_copy(model)
        policy = drifted_policy(model, tokenizer, value_tasks, seed)
        repeated = [task for task in tasks for _ in range(SAMPLES_PER_TASK)]
        batch = rollouts.generate(policy, tokenizer, repeated, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                                  seed=seed + 1)
        value_batch = rollouts.generate(policy, tokenizer, [task for task in value_tasks for _ in range(2)],
                                        max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=seed + 2)
        value_model = ValueModel(policy)
        value_returns = torch.where(value_batch.response_mask.bool(), value_batch.scores[:, None].expand_as(
            value_batch.response_mask.float()), torch.zeros(value_batch.response_mask.shape))
        fit_value_head(value_model, value_batch, value_returns)
        with torch.no_grad():
            log_probs = rollouts.response_log_probs(policy, batch).double().cpu()
            ref_log_probs = rollouts.response_log_probs(reference, batch).double().cpu()
            values = rollouts.response_values(value_model, batch).double().cpu()
        found["rollouts"] = {"responses": len(batch.problems), "pass_rate": sum(batch.correct) / len(batch.problems),
                             "response_tokens": int(batch.response_mask.sum()),
                             "examples": [{"prompt": task.prompt, "response": text, "correct": right}
                                          for task, text, right in list(zip(batch.problems, batch.texts, batch.correct))[:4]]}
        found["candidates"] = [candidate_signal(name, setting, batch, log_probs, ref_log_probs, values)
                               for name, setting in CANDIDATES.items()]
        found["framework"] = verl_agreement(batch, log_probs, ref_log_probs, values)
        return {"status": "ok"}

    with memory_watch(plan) as memory, cpu_threads(plan):
        outcome = run_with_oom_guard(measure, torch_module=torch)
    candidates = found.get("candidates", [])
    body = {"measurement": "six reward-signal settings on rollouts of the plan's model (verifier scores)",
            "status": outcome["status"], "error": outcome.get("error"), "plan": plan.public(), "model": found.get("model"),
            "seed": seed, "tasks": {"task": TASK, "pool_sha256": pool_sha256(tasks), "count": len(tasks),
                                    "samples_per_task": SAMPLES_PER_TASK},
            "policy": f"the loaded model after {DRIFT_STEPS} supervised AdamW steps (lr {DRIFT_LR}) on its own correct "
                      "answers; the reference is the loaded model, frozen",
            "max_kl_share": MAX_KL_SHARE, "rollouts": found.get("rollouts"), "candidates": candidates,
            "framework": found.get("framework"), "memory": memory,
            "decision": decide(candidates) if outcome["status"] == "ok" else {"decision": "reject",
                                                                              "reason": outcome["status"]}}
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    say(f"reward_signal: wrote {path.name} (sha256 {digest[:12]}), decision {body['decision']['decision']}")
