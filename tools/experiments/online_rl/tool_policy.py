"""A policy that learns when to call the calculator: the lab model choosing among candidate actions.

The lab model was pretrained to answer sums with a bare integer; it never writes `CALC ...` on its
own. So each turn offers a small set of candidate actions, and the policy is the lab model's own
preference among them. Before a calculator result the candidates are `CALC a op b` and
`ANSWER <a + b>` (the sum the model knows, wrong for the tasks used); after a result `RESULT v` they
are `ANSWER v` and another `CALC a op b`.

The chapter's three functions run every part of an episode (a `ToolMechanism`; a notebook passes the
learner's): `env_step` answers each action; `assemble_trajectory` turns the episode's token segments
(`tool_chat`: prompt, model turns, tool observations under the `tool` role) into one row with its loss
mask and turn ids; `attribute_reward` credits the terminal reward to the model turns. A candidate's
score s_c is the sum of the log-probabilities of the tokens of its turn: the episode so far plus the
candidate as the next model segment, assembled, and the positions whose `loss_mask` is 1 and whose
`turn_ids` is that turn's.

The policy that samples is the tempered softmax pi_T(c) = softmax(s / T)(c). Training maximises
J_T = E_{episodes ~ pi_T}[R] by REINFORCE: per model turn the loss is -A * log pi_T(chosen), whose
gradient with respect to the scores is (1 / T) * A * (onehot(chosen) - pi_T). So the temperature
changes three things: which episodes are sampled (exploration: the lab model gives `CALC` about 1e-3
of the mass on many tasks, so at T = 1 a batch rarely reaches a reward), the weights pi_T inside the
gradient, and its scale 1 / T. AdamW divides each update by the running root mean square of the
gradient, so a constant scale such as 1 / T cancels in its steps (up to its eps); with plain SGD it
would divide the learning rate by T. Greedy evaluation takes the highest score, which T does not change.

The advantage of model turn k of episode i, with m = K_i - 1 - k turns after it, is
    A_ik = G_ik - B_ik,  G_ik = gamma^m R_i,  B_ik = gamma^m * mean_{j != i} R_j:
the baseline is the same quantity as the return (the discounted return m turns before the end, here
the other episodes' mean) and leaves the episode's own reward out. Both come from `attribute_reward`.
A batch-mean reward subtracted from a discounted return instead would give a successful episode's
early turn a negative advantage whenever gamma^m is below the batch's success rate.

`reward="shuffled"` is the negative control: each batch's terminal rewards are permuted among its
episodes before the credit, so the reward no longer depends on the actions; everything else is equal.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.errors import ConfigError
from tools.experiments.online_rl import tool_env, trajectories
from tools.experiments.online_rl.tool_chat import model_segment, prompt_segment, tool_segment

REWARDS = ("task", "shuffled")


@dataclass(frozen=True)
class ToolSettings:
    """One tool-use RL run."""

    steps: int = 10
    episodes_per_step: int = 16
    learning_rate: float = 2e-4
    temperature: float = 4.0
    gamma: float = 0.9
    max_turns: int = 3
    train_tasks: int = 64
    eval_tasks: int = 128
    task_seed: int = 7
    reward: str = "task"
    seed: int = 0

    def __post_init__(self):
        if self.reward not in REWARDS:
            raise ConfigError(f"reward must be one of {REWARDS}, got {self.reward!r}")
        if self.episodes_per_step < 2:
            raise ConfigError("the leave-one-out baseline needs at least two episodes per step")

    def public(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ToolMechanism:
    """The chapter's three functions an episode runs through; the package's own by default."""

    env_step: Callable = tool_env.env_step
    assemble_trajectory: Callable = trajectories.assemble_trajectory
    attribute_reward: Callable = trajectories.attribute_reward


PACKAGE_MECHANISM = ToolMechanism()


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


def candidate_scores(model, items: Sequence[tuple[list[dict], list[dict]]], assemble: Callable) -> list:
    """For each `(segments, candidate_segments)`: a tensor of the candidates' scores, one padded forward.

    A candidate's row is `assemble(segments + [candidate])`; its score sums the token log-probabilities at
    the positions where `loss_mask` is 1 and `turn_ids` is the candidate's turn (`model_turns - 1`)."""
    import torch

    rows, selections = [], []
    for segments, options in items:
        for option in options:
            assembled = assemble(list(segments) + [option])
            turn = assembled["model_turns"] - 1
            rows.append(assembled["input_ids"])
            selections.append([int(kept == 1 and owner == turn)
                               for kept, owner in zip(assembled["loss_mask"], assembled["turn_ids"])])
    width = max(len(row) for row in rows)
    device = next(model.parameters()).device
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    selected = torch.zeros((len(rows), width), dtype=torch.float32)
    for index, (row, selection) in enumerate(zip(rows, selections)):
        input_ids[index, :len(row)] = torch.tensor(row)
        attention[index, :len(row)] = 1
        selected[index, :len(selection)] = torch.tensor(selection, dtype=torch.float32)
    input_ids, attention, selected = input_ids.to(device), attention.to(device), selected.to(device)
    logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
    token_logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    sums = (token_logprobs * selected[:, 1:]).sum(dim=1)
    out, start = [], 0
    for _, options in items:
        out.append(sums[start:start + len(options)])
        start += len(options)
    return out


def _new_episode(tokenizer, task: tuple[int, str, int], max_turns: int) -> dict:
    a, op, b = task
    messages = [{"role": "user", "content": tool_env.PROMPT.format(a=a, op=op, b=b)}]
    return {"task": list(task), "state": {"a": a, "op": op, "b": b, "turn": 0, "max_turns": max_turns, "done": False},
            "messages": messages, "segments": [prompt_segment(tokenizer, messages)], "observation": None,
            "turns": [], "actions": [], "reward": 0.0}


def play_batch(model, tokenizer, tasks: Sequence, mechanism: ToolMechanism, *, max_turns: int, greedy: bool,
               rng: random.Random, temperature: float = 1.0) -> list[dict]:
    """One episode per task, played in lockstep (one forward per turn for every live episode).

    Each episode keeps per turn the segments before it, the candidates (as model segments), the chosen
    index, and its final segments, actions and terminal reward."""
    import torch

    episodes = [_new_episode(tokenizer, task, max_turns) for task in tasks]
    for _ in range(max_turns):
        live = [episode for episode in episodes if not episode["state"]["done"]]
        if not live:
            break
        options = [candidates(episode["state"], episode["observation"]) for episode in live]
        segments = [[model_segment(tokenizer, episode["messages"], action) for action in actions]
                    for episode, actions in zip(live, options)]
        with torch.no_grad():
            scores = candidate_scores(model, [(episode["segments"], cands) for episode, cands in zip(live, segments)],
                                      mechanism.assemble_trajectory)
        for episode, actions, cands, values in zip(live, options, segments, scores):
            probabilities = torch.softmax(values / temperature, dim=0)
            chosen = int(probabilities.argmax()) if greedy else \
                rng.choices(range(len(actions)), weights=probabilities.tolist())[0]
            action = actions[chosen]
            episode["turns"].append({"segments": list(episode["segments"]), "candidates": cands, "chosen": chosen})
            result = mechanism.env_step(dict(episode["state"]), action)
            episode["segments"] = episode["segments"] + [cands[chosen]]
            if not result["state"]["done"]:
                episode["segments"].append(tool_segment(tokenizer, episode["messages"], action, result["observation"]))
            episode["messages"] = episode["messages"] + [{"role": "assistant", "content": action},
                                                         {"role": "tool", "content": result["observation"]}]
            episode["actions"].append(action)
            episode["state"], episode["observation"] = result["state"], result["observation"]
            episode["reward"] = float(result["reward"])
    if any(not episode["state"]["done"] for episode in episodes):
        raise ConfigError(f"env_step did not end an episode within max_turns = {max_turns}")
    for episode in episodes:
        episode["called_calculator"] = any(action.startswith("CALC") for action in episode["actions"])
    return episodes


def episode_advantages(turn_ids_per_episode: Sequence[list[int]], rewards: Sequence[float], gamma: float,
                       attribute: Callable = trajectories.attribute_reward) -> list[list[float]]:
    """Per episode, per model turn: G_ik - B_ik (module docstring), both from `attribute`.

    G_ik is `attribute(turn_ids, R_i, gamma)`'s return of turn k; B_ik the same call's return for the
    leave-one-out mean reward of the other episodes."""
    if len(rewards) != len(turn_ids_per_episode) or len(rewards) < 2:
        raise ConfigError("need one reward per episode and at least two episodes for a leave-one-out baseline")
    total = sum(rewards)
    advantages = []
    for turn_ids, reward in zip(turn_ids_per_episode, rewards):
        others = (total - reward) / (len(rewards) - 1)
        returns = attribute(list(turn_ids), reward, gamma)["turn_returns"]
        baselines = attribute(list(turn_ids), others, gamma)["turn_returns"]
        advantages.append([float(value - baseline) for value, baseline in zip(returns, baselines)])
    return advantages


def evaluate(model, tokenizer, tasks: Sequence, max_turns: int, mechanism: ToolMechanism = PACKAGE_MECHANISM) -> dict:
    """Greedy episodes on `tasks`: the share that call the calculator and the share answered correctly.

    The policy is `mechanism`'s (its trajectory assembly defines the candidates' scores); the episodes are
    judged by the course's own `tool_env.env_step`, so a wrong reward in training cannot pass as success."""
    judged = ToolMechanism(tool_env.env_step, mechanism.assemble_trajectory, mechanism.attribute_reward)
    episodes = play_batch(model, tokenizer, tasks, judged, max_turns=max_turns, greedy=True, rng=random.Random(0))
    return {"calculator_share": sum(e["called_calculator"] for e in episodes) / len(episodes),
            "success": sum(e["reward"] for e in episodes) / len(episodes), "episodes": len(episodes)}


def lab_task_exact_match(model, tokenizer) -> dict:
    """The regression check: greedy exact match on the lab task's held-out split (plain chat, no tool)."""
    from tools.data import lab_tasks
    from tools.models.lab_sampling import exact_match

    result = exact_match(model, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout")
    return {"exact_match": result["accuracy"], "problems": result["total"]}


def run_tool_rl(model, tokenizer, settings: ToolSettings, mechanism: ToolMechanism = PACKAGE_MECHANISM, *,
                log: Callable | None = None) -> dict:
    """Greedy evaluation before, `settings.steps` REINFORCE steps on sampled episodes, evaluation after."""
    import torch

    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    shuffle = random.Random(settings.seed + 7919)
    train = make_tasks(settings.train_tasks, settings.task_seed)
    held_out = make_tasks(settings.eval_tasks, settings.task_seed + 1000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    was_training = model.training
    model.eval()
    before = {**evaluate(model, tokenizer, held_out, settings.max_turns, mechanism),
              "lab_task": lab_task_exact_match(model, tokenizer)}
    steps = []
    for step in range(settings.steps):
        batch = play_batch(model, tokenizer, [rng.choice(train) for _ in range(settings.episodes_per_step)], mechanism,
                           max_turns=settings.max_turns, greedy=False, rng=rng, temperature=settings.temperature)
        rewards = [episode["reward"] for episode in batch]
        credited = shuffle.sample(rewards, len(rewards)) if settings.reward == "shuffled" else rewards
        turn_ids = [mechanism.assemble_trajectory(episode["segments"])["turn_ids"] for episode in batch]
        advantages = episode_advantages(turn_ids, credited, settings.gamma, mechanism.attribute_reward)
        turns = [turn for episode in batch for turn in episode["turns"]]
        gains = [value for values in advantages for value in values]
        if len(gains) != len(turns):
            raise ConfigError(f"attribute_reward credited {len(gains)} model turns, the episodes played {len(turns)}")
        model.train()
        scores = candidate_scores(model, [(turn["segments"], turn["candidates"]) for turn in turns],
                                  mechanism.assemble_trajectory)
        chosen = torch.stack([torch.log_softmax(values / settings.temperature, dim=0)[turn["chosen"]]
                              for values, turn in zip(scores, turns)])
        loss = -(torch.tensor(gains, dtype=chosen.dtype) * chosen).sum() / len(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        model.eval()
        negative = sum(value < 0 for reward, values in zip(credited, advantages) if reward > 0 for value in values)
        steps.append({"step": step, "loss": float(loss.detach()), "mean_reward": sum(rewards) / len(rewards),
                      "calculator_share": sum(e["called_calculator"] for e in batch) / len(batch), "turns": len(turns),
                      "successful_turns_with_negative_advantage": negative})
        if log:
            log(f"step {step}: sampled episodes calling the calculator {steps[-1]['calculator_share']:.2f}, "
                f"mean reward {steps[-1]['mean_reward']:.2f}")
    after = {**evaluate(model, tokenizer, held_out, settings.max_turns, mechanism),
             "lab_task": lab_task_exact_match(model, tokenizer)}
    model.train(was_training)
    return {"settings": settings.public(), "before": before, "after": after, "steps": steps,
            "examples": {"train": train[:4], "held_out": held_out[:4]}}
