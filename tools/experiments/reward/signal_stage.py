"""PT-REWARD-SIGNAL's stage: seven reward-signal settings on real rollouts of the plan's model.

The reference is the loaded model, frozen. The policy is the same model after a few supervised
steps on its own correct answers (a policy part-way through training, so the KL to the reference is
not zero). The policy samples responses to lab problems; the verifier scores them; a value model
(the policy's backbone with a linear head fitted by ridge regression to the observed returns of a
separate batch) gives V. Each candidate setting builds token rewards, GAE advantages and the
diagnostic gate from the same tensors with the plan's mechanism (the chapter's three exercise
functions when the notebook passes them, else the package's `signals`); verl 0.9.1's KL penalty and
GAE are run on the same tensors too (k1 and k3, gamma 1 and 0.9). The stage decision is computed from
the candidates: accept_mechanism when the baseline setting is accepted and every control setting is
rejected.
"""

from __future__ import annotations

from tools.core import effects
from tools.core.numerics import cpu_numerics
from tools.data import lab_tasks
from tools.experiments.reward import rollouts, signals
from tools.experiments.reward.rollouts import pool_sha256
from tools.experiments.reward.stage import cpu_threads, load_policy, memory_watch

STAGE = "signal_matrix"
SCHEMA = "reward-signal-matrix/v2"
DEFAULT_SEEDS = (0, 1, 2)
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
    "same_score_no_baseline": {"kl_coef": 0.0, "estimator": "k1", "reward": "constant", "values": "zero", "gamma": 1.0,
                               "lam": 1.0},
}
"""Seven settings varying the KL constraint, the terminal reward and the return. The baseline is the
first; the last three are controls the gate must reject: a KL term that drowns the score, a signal
with no reward and no baseline (every advantage 0), and every response scored 1 with no baseline and
lam = 1 (every advantage exactly 1: not zero, yet nothing but rounding noise survives whitening)."""
BASELINE, CONTROLS = "kl0.05_gae", ("kl20_k3_gae", "no_reward_no_baseline", "same_score_no_baseline")
MECHANISM = ("token_level_rewards", "gae_advantages", "whiten_and_gate")
PACKAGE_FUNCTIONS = {"token_level_rewards": signals.token_rewards, "gae_advantages": signals.gae,
                     "whiten_and_gate": signals.whiten_and_gate}
"""The package's copies of the chapter's three exercise functions (a run without a notebook uses them)."""
SCORES = {"verifier": lambda batch: batch.scores.double(),
          "none": lambda batch: batch.scores.double() * 0.0,
          "constant": lambda batch: batch.scores.double() * 0.0 + 1.0}
"""The terminal reward of each setting: the verifier's score, nothing, or 1 for every response."""


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


def candidate_signal(name: str, setting: dict, batch, log_probs, ref_log_probs, values, functions=None) -> dict:
    """One setting's token rewards, GAE, whitened advantages and gate (by `functions`, the chapter's three
    exercise names; the package's by default), with what the record keeps."""
    import torch

    functions = functions or PACKAGE_FUNCTIONS
    mask = batch.response_mask
    scores = SCORES[setting["reward"]](batch)
    baseline = values if setting["values"] == "value_model" else torch.zeros_like(values)
    shaped = functions["token_level_rewards"](scores, log_probs, ref_log_probs, mask, setting["kl_coef"],
                                              setting["estimator"])
    estimate = functions["gae_advantages"](shaped["rewards"], baseline, mask, setting["gamma"], setting["lam"])
    gated = functions["whiten_and_gate"](estimate["advantages"], mask, shaped["kl"], setting["kl_coef"], scores,
                                         MAX_KL_SHARE)
    valid = mask.bool()
    picked = estimate["advantages"][valid]
    return {"name": name, "setting": dict(setting), "mean_kl": float(shaped["mean_kl"]),
            "kl_share": float(gated["kl_share"]), "reasons": list(gated["reasons"]), "decision": gated["decision"],
            "advantage_mean": float(picked.mean()), "advantage_std": float(picked.std()),
            "advantage_abs_max": float(picked.abs().max()), "advantage_spread": float(picked.max() - picked.min()),
            "whitened_abs_max": float(gated["whitened"][valid].abs().max()),
            "whitened_first_response": [round(float(value), 6) for value in gated["whitened"][0][valid[0]]],
            "return_mean": float(estimate["returns"][valid].mean())}


def verl_agreement(batch, log_probs, ref_log_probs, values) -> dict:
    """verl's KL penalty (k1 at beta 0.05, k3 at beta 20, as the baseline and the KL control) and GAE (gamma 1
    and 0.9) on this stage's own tensors (float64), against `signals`, with how many valid tokens reach k3's
    log-ratio clamp and its cap; where verl or its runtime dependencies are not installed (the GPU image has
    neither verl nor ray), the numbers are None and the reason says so."""
    from tools.experiments.reward import verl_reference

    keys = ("rewards_max_abs_diff", "kl_max_abs_diff", "whitened_max_abs_diff", "returns_max_abs_diff")
    try:
        verl_reference.core_algos()
    except ImportError as error:
        return {"verl": None, **{key: None for key in keys},
                "not_measured": f"verl could not be imported here ({type(error).__name__}: {error})"}
    mask = batch.response_mask
    valid = mask.bool()
    scores = batch.scores.double()
    reward_diffs, kl_diffs = [], []
    for kl_coef, estimator in ((0.05, "k1"), (20.0, "k3")):
        ours = signals.token_rewards(scores, log_probs, ref_log_probs, mask, kl_coef, estimator)
        verl_rewards, verl_kl = verl_reference.kl_token_rewards(scores, log_probs, ref_log_probs, mask, kl_coef, estimator)
        reward_diffs.append(float((ours["rewards"] - verl_rewards).abs().max()))
        kl_diffs.append(float((ours["kl"] - verl_kl).abs().max()))
        if estimator == "k1":
            baseline_rewards = ours["rewards"]
    whitened_diffs, return_diffs = [], []
    for gamma in (1.0, 0.9):
        estimate = signals.gae(baseline_rewards, values, mask, gamma, 0.95)
        verl_advantages, verl_returns = verl_reference.gae(baseline_rewards, values, mask, gamma, 0.95)
        whitened_diffs.append(float((signals.masked_whiten(estimate["advantages"], mask) - verl_advantages)[valid]
                                    .abs().max()))
        return_diffs.append(float((estimate["returns"] - verl_returns)[valid].abs().max()))
    d = (ref_log_probs - log_probs)[valid]
    k3 = signals.kl_estimate(log_probs, ref_log_probs, "k3")[valid]
    return {"verl": verl_reference.version(), "rewards_max_abs_diff": max(reward_diffs),
            "kl_max_abs_diff": max(kl_diffs), "whitened_max_abs_diff": max(whitened_diffs),
            "returns_max_abs_diff": max(return_diffs), "gammas": [1.0, 0.9], "estimators": ["k1", "k3"],
            "k3_log_ratio_clamped_tokens": int((d.abs() > signals.KL_CLAMP_LOG_RATIO).sum()),
            "k3_capped_tokens": int((k3 >= signals.KL_CLAMP_K3).sum()), "valid_tokens": int(valid.sum())}


def decide_seed(candidates: list[dict]) -> dict:
    """One seed's verdict: accept_mechanism when the baseline is accepted and every control rejected, else
    reject."""
    by_name = {item["name"]: item for item in candidates}
    ok = by_name[BASELINE]["decision"] == "accept" and all(by_name[name]["decision"] == "reject" for name in CONTROLS)
    return {"decision": "accept_mechanism" if ok else "reject",
            "reason": ("the gate accepts the baseline and rejects every control" if ok else
                       "the gate does not separate the baseline from the controls")}


def decide(per_seed: list[dict]) -> dict:
    """The stage's decision: accept_mechanism when the gate separates the baseline from every control on
    every seed, else reject (naming the seeds where it did not)."""
    failed = [entry["seed"] for entry in per_seed if decide_seed(entry["candidates"])["decision"] != "accept_mechanism"]
    if failed:
        return {"decision": "reject", "reason": f"the gate does not separate the baseline from the controls on seeds "
                                                f"{failed}"}
    return {"decision": "accept_mechanism", "reason": f"the gate accepts the baseline and rejects every control on "
                                                      f"each of {len(per_seed)} seed(s)"}


def paired_effects(per_seed: list[dict]) -> dict | None:
    """Paired over the seeds (None with fewer than two): the KL share of the KL control minus the baseline's."""
    if len(per_seed) < 2:
        return None

    def share(name):
        return {entry["seed"]: next(item["kl_share"] for item in entry["candidates"] if item["name"] == name)
                for entry in per_seed}

    return {"kl_share_control_over_baseline": effects.paired_effect(share("kl20_k3_gae"), share(BASELINE),
                                                                    metric="KL share")}


def measure_seed(plan, seed: int, tasks, value_tasks, functions) -> dict:
    """One seed: load, drift the policy, sample, fit the value head, and every candidate on the same tensors."""
    import torch

    from tools.experiments.reward.value_model import ValueModel, frozen_copy

    torch.manual_seed(seed)
    model, tokenizer, identity = load_policy(plan)
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
    candidates = [candidate_signal(name, setting, batch, log_probs, ref_log_probs, values, functions)
                  for name, setting in CANDIDATES.items()]
    return {"seed": seed, "model": identity,
            "rollouts": {"responses": len(batch.problems), "pass_rate": sum(batch.correct) / len(batch.problems),
                         "response_tokens": int(batch.response_mask.sum()),
                         "examples": [{"prompt": task.prompt, "response": text, "correct": right}
                                      for task, text, right in list(zip(batch.problems, batch.texts, batch.correct))[:4]]},
            "candidates": candidates, "decision": decide_seed(candidates),
            "framework": verl_agreement(batch, log_probs, ref_log_probs, values)}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda _: None)
    seeds = plan.seeds or DEFAULT_SEEDS
    drawn = lab_tasks.sample_problems(TASK, "train", TASK_COUNT + VALUE_TASK_COUNT, TASK_SEED)
    tasks, value_tasks = drawn[:TASK_COUNT], drawn[TASK_COUNT:]
    sink.require_new([STAGE])
    if not plan.writes:
        say(f"reward_signal (dry_run): seeds {list(seeds)}, each {len(tasks)} tasks x {SAMPLES_PER_TASK} samples from "
            f"{plan.model} ({plan.model_source}, {plan.device}); seven candidate settings {', '.join(CANDIDATES)}; "
            f"functions {plan.mechanism.sources_line(PACKAGE_FUNCTIONS)}; nothing is loaded or written")
        return
    import torch

    from tools.measure.training import run_with_oom_guard

    functions = {name: plan.mechanism.function(name, PACKAGE_FUNCTIONS[name]) for name in MECHANISM}
    per_seed: list[dict] = []

    def measure() -> dict:
        for seed in seeds:
            per_seed.append(measure_seed(plan, seed, tasks, value_tasks, functions))
            say(f"reward_signal seed {seed}: {per_seed[-1]['decision']['decision']}")
        return {"status": "ok"}

    with memory_watch(plan) as memory, cpu_threads(plan):
        outcome = run_with_oom_guard(measure, torch_module=torch)
    ok = outcome["status"] == "ok"
    body = {"measurement": "seven reward-signal settings on rollouts of the plan's model (verifier scores), per seed",
            "mechanism": plan.mechanism.describe(PACKAGE_FUNCTIONS),
            "status": outcome["status"], "error": outcome.get("error"), "plan": plan.public(),
            "model": per_seed[0]["model"] if per_seed else None, "seeds": list(seeds),
            "tasks": {"task": TASK, "pool_sha256": pool_sha256(tasks), "count": len(tasks),
                      "samples_per_task": SAMPLES_PER_TASK},
            "policy": f"the loaded model after {DRIFT_STEPS} supervised AdamW steps (lr {DRIFT_LR}) on its own correct "
                      "answers; the reference is the loaded model, frozen",
            "max_kl_share": MAX_KL_SHARE, "cpu_numerics": cpu_numerics(), "per_seed": per_seed,
            "effects": paired_effects(per_seed) if ok else None,
            "memory": memory,
            "decision": decide(per_seed) if ok else {"decision": "reject", "reason": outcome["status"]}}
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    say(f"reward_signal: wrote {path.name} (sha256 {digest[:12]}), decision {body['decision']['decision']}")
