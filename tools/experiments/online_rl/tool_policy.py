"""A policy that learns when to call the calculator: the lab model choosing among candidate actions.

The lab model was pretrained to answer sums with a bare integer; it never writes `CALC ...` on its
own. So each turn offers a small set of candidate actions, and the policy is the lab model's own
preference among them: the softmax over the candidates of the log-probability the model gives each
candidate text as its next assistant reply (the chat so far: the task prompt, earlier actions and the
environment's observations). Before a calculator result the candidates are `CALC a op b` and
`ANSWER <a + b>` (the sum the model knows, wrong for the tasks used); after a result `RESULT v` they
are `ANSWER v` and another `CALC a op b`. The environment is `tool_env.env_step`.

Training is REINFORCE over whole episodes: the terminal reward is credited to the model's turns with
a per-turn discount (`trajectories.attribute_reward`), minus the batch's mean reward as a baseline,
and each turn's loss is -advantage * log softmax(candidate log-probs)[chosen]. Evaluation takes the
most likely candidate at every turn (greedy) and reports the share of episodes that call the
calculator and the share answered correctly.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.experiments.online_rl.tool_env import PROMPT, env_step
from tools.experiments.online_rl.trajectories import attribute_reward
from tools.models.lab_chat import chat_ids


@dataclass(frozen=True)
class ToolSettings:
    """One tool-use RL run."""

    steps: int = 10
    episodes_per_step: int = 16
    learning_rate: float = 3e-3
    gamma: float = 0.9
    max_turns: int = 3
    train_tasks: int = 64
    eval_tasks: int = 64
    task_seed: int = 7
    seed: int = 0

    def public(self) -> dict:
        return asdict(self)


def make_tasks(count: int, seed: int) -> list[tuple[int, str, int]]:
    """`count` tasks `a op b` the lab model cannot do by itself: two-digit a times or minus a one-digit b >= 2."""
    rng = random.Random(seed)
    return [(rng.randint(10, 99), rng.choice(["*", "-"]), rng.randint(2, 9)) for _ in range(count)]


def candidates(state: dict, last_observation: str | None) -> list[str]:
    """The actions offered this turn (module docstring)."""
    calc = f"CALC {state['a']} {state['op']} {state['b']}"
    if last_observation is not None and last_observation.startswith("RESULT "):
        return [f"ANSWER {last_observation.split(' ', 1)[1]}", calc]
    return [calc, f"ANSWER {state['a'] + state['b']}"]


def candidate_logprobs(model, tokenizer, turns: Sequence[tuple[list[dict], list[str]]]):
    """For each `(messages, candidates)`: a tensor of the candidates' log-probabilities (sum over the
    reply's tokens, through its end-of-turn token) as the next assistant message; one padded forward."""
    import torch

    rows, spans = [], []
    for messages, options in turns:
        for option in options:
            ids, prompt_length = chat_ids(tokenizer, messages, option)
            rows.append(ids)
            spans.append(prompt_length)
    width = max(len(row) for row in rows)
    device = next(model.parameters()).device
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        input_ids[index, :len(row)] = torch.tensor(row)
        attention[index, :len(row)] = 1
    logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits.float()
    token_logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:].to(device).unsqueeze(-1))
    token_logprobs = token_logprobs.squeeze(-1)
    positions = torch.arange(width - 1, device=device).unsqueeze(0)
    starts = torch.tensor(spans, device=device).unsqueeze(1) - 1
    ends = torch.tensor([len(row) for row in rows], device=device).unsqueeze(1) - 1
    sums = torch.where((positions >= starts) & (positions < ends), token_logprobs, torch.zeros_like(token_logprobs)).sum(1)
    out, start = [], 0
    for _, options in turns:
        out.append(sums[start:start + len(options)])
        start += len(options)
    return out


def play(model, tokenizer, task: tuple[int, str, int], *, max_turns: int, greedy: bool, rng: random.Random) -> dict:
    """One episode; per turn the chat before it, the candidates and the chosen index; the terminal reward."""
    import torch

    a, op, b = task
    state = {"a": a, "op": op, "b": b, "turn": 0, "max_turns": max_turns, "done": False}
    messages = [{"role": "user", "content": PROMPT.format(a=a, op=op, b=b)}]
    turns, observation, reward = [], None, 0.0
    while not state["done"]:
        options = candidates(state, observation)
        with torch.no_grad():
            probabilities = torch.softmax(candidate_logprobs(model, tokenizer, [(messages, options)])[0], dim=0)
        chosen = int(probabilities.argmax()) if greedy else rng.choices(range(len(options)), weights=probabilities.tolist())[0]
        turns.append({"messages": [dict(m) for m in messages], "candidates": options, "chosen": chosen})
        result = env_step(state, options[chosen])
        state, observation, reward = result["state"], result["observation"], result["reward"]
        messages += [{"role": "assistant", "content": options[chosen]}, {"role": "user", "content": observation}]
    actions = [turn["candidates"][turn["chosen"]] for turn in turns]
    return {"task": list(task), "turns": turns, "actions": actions, "reward": reward,
            "called_calculator": any(action.startswith("CALC") for action in actions)}


def evaluate(model, tokenizer, tasks: Sequence, max_turns: int) -> dict:
    """Greedy episodes on `tasks`: the share that call the calculator and the share answered correctly."""
    episodes = [play(model, tokenizer, task, max_turns=max_turns, greedy=True, rng=random.Random(0)) for task in tasks]
    return {"calculator_share": sum(e["called_calculator"] for e in episodes) / len(episodes),
            "success": sum(e["reward"] for e in episodes) / len(episodes), "episodes": len(episodes)}


def run_tool_rl(model, tokenizer, settings: ToolSettings, *, log: Callable | None = None) -> dict:
    """Greedy evaluation before, `settings.steps` REINFORCE steps on sampled episodes, evaluation after."""
    import torch

    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    train = make_tasks(settings.train_tasks, settings.task_seed)
    held_out = make_tasks(settings.eval_tasks, settings.task_seed + 1000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    was_training = model.training
    model.eval()
    before = evaluate(model, tokenizer, held_out, settings.max_turns)
    steps = []
    for step in range(settings.steps):
        batch = [play(model, tokenizer, rng.choice(train), max_turns=settings.max_turns, greedy=False, rng=rng)
                 for _ in range(settings.episodes_per_step)]
        baseline = sum(e["reward"] for e in batch) / len(batch)
        turns, advantages = [], []
        for episode in batch:
            credit = attribute_reward(list(range(len(episode["turns"]))), episode["reward"], settings.gamma, baseline)
            for turn, advantage in zip(episode["turns"], credit["turn_advantages"]):
                turns.append(turn)
                advantages.append(advantage)
        model.train()
        logprobs = candidate_logprobs(model, tokenizer, [(turn["messages"], turn["candidates"]) for turn in turns])
        chosen = torch.stack([torch.log_softmax(values, dim=0)[turn["chosen"]] for values, turn in zip(logprobs, turns)])
        loss = -(torch.tensor(advantages, dtype=chosen.dtype) * chosen).sum() / len(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        model.eval()
        steps.append({"step": step, "loss": float(loss.detach()), "mean_reward": baseline,
                      "calculator_share": sum(e["called_calculator"] for e in batch) / len(batch),
                      "turns": len(turns)})
        if log:
            log(f"step {step}: sampled episodes calling the calculator {steps[-1]['calculator_share']:.2f}, "
                f"mean reward {baseline:.2f}")
    after = evaluate(model, tokenizer, held_out, settings.max_turns)
    model.train(was_training)
    return {"settings": settings.public(), "before": before, "after": after, "steps": steps,
            "examples": {"train": train[:4], "held_out": held_out[:4]}}
