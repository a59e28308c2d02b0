"""The chain's training runs: one LoRA adapter on the admitted data, resumable, measured by its answers.

Projects 63, 65 and 62 train the same way, so their runs differ only in what they compare (the rank,
the base precision): the base model (the lab student in cpu_smoke; Qwen2.5-0.5B-Instruct from the
local cache or `random_init` on CUDA) in float32, bfloat16 or NF4 (transformers' `BitsAndBytesConfig`,
bitsandbytes' `Linear4bit`), a peft LoRA adapter initialised from the run's seed (with dropout), AdamW
under a learning-rate schedule, a fixed number of steps. Every batch mixes the task's records with
replay records of the base's own task (`replay_fraction` of its rows): the remedy practitioners use
against forgetting. The loss is on the reply tokens only.

What a run measures (`answer_metrics`), on every evaluation set it is given (the task's validation or
evaluation split, the base's own skill as a regression suite):

- `exact_match`: every reply token (the answer's digits and the end of turn) is the argmax given
  the correct prefix: the greedy answer of the whole reply (up to ties), from one forward pass;
- `digit_accuracy`: the share of answer-digit tokens that are right (the end-of-turn token, a
  format token, is never counted);
- `eval_loss`: the mean reply-token cross-entropy.

No score counts format tokens alone: a run that only learns to stop gains nothing here. The first
evaluation set is also measured at every quarter of the run (the learning curve); a run whose loss
there still fell by more than `UNDERTRAINED_DROP` over the last quarter is marked undertrained.

A checkpoint after step k holds everything the next step depends on: the adapter, the optimiser
and scheduler states, the torch, Python and NumPy random states (dropout draws from torch's), the
data-order cursor and the sha256 of the data it was trained on. `train_run(resume_from=...)` loads
it in a fresh process and makes the steps after k; a checkpoint of another configuration, or of
other data, is refused before any step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from tools.errors import ConfigError
from tools.models.lab import training_batch
from tools.core.numerics import one_thread_on_cpu  # noqa: F401 (the chain stages take it from here)
from tools.models.adapters import file_hashes, save_adapter  # noqa: F401 (the chain stages take them from here)

IGNORE_INDEX = -100
BASES = ("float32", "bfloat16", "nf4")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "nf4": torch.bfloat16}
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SCHEDULES = ("constant", "linear", "cosine")
CHECKPOINT_FILES = ("adapter_state.pt", "training_state.pt", "trainer_state.json")
UNDERTRAINED_DROP = 0.02
"""A run is undertrained when its curve's loss fell by more than this share over the last quarter."""
QUALITY_METRIC = ("answer exact match: every reply token (answer digits and end of turn) the argmax given the "
                  "correct prefix, i.e. the greedy answer of the whole reply, from one forward pass")
DIGIT_METRIC = "the share of answer-digit tokens predicted right (the end-of-turn token is not counted)"


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides one training run (its `public()` is what comparability reads)."""

    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] = LINEAR
    dropout: float = 0.05
    steps: int = 80
    batch_size: int = 16
    replay_fraction: float = 0.5
    learning_rate: float = 3e-3
    schedule: str = "cosine"
    seed: int = 1
    base: str = "float32"

    def __post_init__(self) -> None:
        for name in ("rank", "steps", "batch_size", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed" else 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.base not in BASES:
            raise ConfigError(f"base must be one of {BASES}, got {self.base!r}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        for name in ("alpha", "learning_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("dropout", "replay_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ConfigError(f"{name} must be a number in [0, 1), got {value!r}")
        if not self.target_modules or not all(isinstance(name, str) and name for name in self.target_modules):
            raise ConfigError("target_modules must name at least one module")

    @property
    def replay_rows(self) -> int:
        return round(self.batch_size * self.replay_fraction)

    def public(self) -> dict:
        data = asdict(self)
        data["target_modules"] = list(self.target_modules)
        return data

    @classmethod
    def from_public(cls, data: Mapping) -> "TrainConfig":
        """The config of a `public()` dict (extra keys, such as a data hash, are left out)."""
        fields = {key: value for key, value in data.items() if key in cls.__dataclass_fields__}
        fields["target_modules"] = tuple(fields.get("target_modules", LINEAR))
        return cls(**fields)




# ---- the base model and the data --------------------------------------------------------------

def load_base(model_id: str, model_source: str, base: str, device: str):
    """`(model, tokenizer, identity)`: the base in the precision `base` asks for, on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.models.loading import model_identity, resolve_model

    folder = resolve_model(model_id, model_source)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    kwargs: dict[str, Any] = {"dtype": TORCH_DTYPES[base]}
    if base == "nf4":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16)
        kwargs["device_map"] = {"": device if device == "cpu" else 0}
    with no_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    if base != "nf4":
        model = model.to(device)
    elif device == "cpu":
        keep_cpu_training_layout(model)
    model.config.use_cache = False
    identity = model_identity(folder)
    return model, tokenizer, {**identity, "base_revision": base_revision(identity)}


def keep_cpu_training_layout(model) -> None:
    """bitsandbytes' CPU backend repacks a 4-bit layer's weights for a faster inference kernel the first
    time the layer runs without gradients on a processor with AVX512-BF16, and the packed layout has
    no backward: a run that measures its curve mid-training would then fail at its next step, and
    only on such processors. The repacking is turned off, so every processor runs the same kernels."""
    for module in model.modules():
        if type(module).__name__ == "Linear4bit":
            module.support_avx512bf16_for_cpu = False


def numerics_note() -> dict:
    """What a record's figures depend on besides the code: the CPU numerics in force and where the lab
    weights came from (`COURSE_LAB_MODELS`: the committed weights, or built under this profile)."""
    import os

    from tools.core.numerics import cpu_numerics

    return {"cpu_numerics": cpu_numerics(), "lab_models": os.environ.get("COURSE_LAB_MODELS") or "committed"}


def base_revision(identity: Mapping) -> str | None:
    """The revision a delivery names for its base: the hub commit of a cached model, else the sha256 of
    the weights file of a model built in code (`sha256:<hex>`); None when neither is known."""
    if identity.get("revision"):
        return str(identity["revision"])
    return f"sha256:{identity['weights_sha256']}" if identity.get("weights_sha256") else None


@contextlib.contextmanager
def no_progress_bars():
    """transformers' weight-loading bar off while a base loads (a notebook would show it as a widget)."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()


def render_messages(tokenizer, messages: list[dict], reply: str) -> tuple[list[int], int]:
    """`(ids, prompt_length)` of a chat whose assistant turn is `reply`, ending with its end-of-turn
    token (the newline after it is never predicted)."""
    from tools.models.lab_chat import chat_ids

    return chat_ids(tokenizer, messages, reply)


def render_record(tokenizer, record: Mapping) -> tuple[list[int], int]:
    """A chain record (`tools.data.sft_raw`) rendered: its system and user turns, then its output."""
    from tools.data.sft_raw import chat_messages

    return render_messages(tokenizer, chat_messages(record), record["output"])


def render_problems(tokenizer, problems) -> list[tuple[list[int], int]]:
    """Lab problems (`tools.data.lab_tasks.LabProblem`) rendered with their own chat and target."""
    return [render_messages(tokenizer, problem.messages(), problem.target) for problem in problems]


@dataclass(frozen=True)
class TrainData:
    """The rendered training pools (the task's records, the replay records) and the sha256 of the
    records they came from (what a checkpoint is tied to)."""

    task: tuple
    replay: tuple
    sha256: str


def train_data(tokenizer, records: Sequence[Mapping]) -> TrainData:
    """The admitted training records split into the task pool and the replay pool (source "replay")."""
    from tools.data.sft_raw import split_sha256

    task = tuple(render_record(tokenizer, r) for r in records if r.get("source") != "replay")
    replay = tuple(render_record(tokenizer, r) for r in records if r.get("source") == "replay")
    if not task:
        raise ConfigError("the training records hold no task record")
    return TrainData(task, replay, split_sha256(records))


class DataOrder:
    """Which records each step trains on: per pool, seed-drawn permutations taken one after another;
    its state (random generator, what is left of each permutation, steps drawn) is the data-order
    cursor a checkpoint keeps."""

    def __init__(self, sizes: Mapping[str, int], seed: int) -> None:
        self.sizes = dict(sizes)
        self.rng = random.Random(seed)
        self.left: dict[str, list[int]] = {pool: [] for pool in self.sizes}
        self.drawn = 0

    def batch(self, counts: Mapping[str, int]) -> list[tuple[str, int]]:
        """`(pool, index)` of one step's rows: `counts[pool]` rows of each pool, in pool order."""
        rows = []
        for pool, count in counts.items():
            if count and not self.sizes.get(pool):
                raise ConfigError(f"a step needs {count} rows of the empty pool {pool!r}")
            for _ in range(count):
                if not self.left[pool]:
                    self.left[pool] = list(range(self.sizes[pool]))
                    self.rng.shuffle(self.left[pool])
                rows.append((pool, self.left[pool].pop()))
        self.drawn += 1
        return rows

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"sizes": dict(self.sizes), "rng": [version, list(internal), gauss],
                "left": {pool: list(order) for pool, order in self.left.items()}, "drawn": self.drawn}

    def load_state_dict(self, state: Mapping) -> None:
        if dict(state["sizes"]) != self.sizes:
            raise ConfigError(f"the data-order cursor was saved for pools {state['sizes']}, this run has {self.sizes}")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.left = {pool: list(order) for pool, order in state["left"].items()}
        self.drawn = int(state["drawn"])


def schedule_factor(schedule: str, step: int, steps: int) -> float:
    """The learning-rate multiplier of the update after `step` updates (0-based) of `steps`."""
    if schedule == "constant":
        return 1.0
    progress = min(step, steps) / steps
    return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))


def reply_loss(model, batch: Mapping, device) -> torch.Tensor:
    """Mean cross-entropy over the supervised (reply) tokens of a batch."""
    logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits
    labels = batch["labels"].to(device)[:, 1:]
    logits = logits[:, :-1].float()
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX)


def answer_metrics(model, rendered: Sequence[tuple[list[int], int]], pad_id: int, device, batch_size: int = 128
                   ) -> dict:
    """`exact_match`, `digit_accuracy` and `eval_loss` over `rendered` (see the module docstring), in
    eval mode and without gradients; the reply's last token (its end of turn) is never a digit."""
    was_training = model.training
    model.eval()
    loss_sum, tokens, exact, digits, right_digits = 0.0, 0, 0, 0, 0
    with torch.no_grad():
        for start in range(0, len(rendered), batch_size):
            batch = training_batch(rendered[start:start + batch_size], pad_id)
            logits = model(input_ids=batch["input_ids"].to(device),
                           attention_mask=batch["attention_mask"].to(device)).logits[:, :-1].float()
            labels = batch["labels"].to(device)[:, 1:]
            supervised = labels != IGNORE_INDEX
            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                              ignore_index=IGNORE_INDEX, reduction="sum"))
            tokens += int(supervised.sum())
            right = (logits.argmax(-1) == labels) & supervised
            exact += int((right | ~supervised).all(dim=1).sum())
            last = supervised.long().cumsum(dim=1) == supervised.sum(dim=1, keepdim=True)
            answer = supervised & ~(last & supervised)  # every reply token but the end of turn
            digits += int(answer.sum())
            right_digits += int((right & answer).sum())
    model.train(was_training)
    return {"exact_match": exact / len(rendered), "digit_accuracy": right_digits / digits if digits else None,
            "eval_loss": loss_sum / tokens, "examples": len(rendered)}


# ---- the adapter -------------------------------------------------------------------------------

def attach_adapter(model, config: TrainConfig):
    """The model wrapped with a LoRA adapter initialised from the run's seed; the base is frozen."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(config.seed)
    return get_peft_model(model, LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
                                            target_modules=list(config.target_modules), bias="none",
                                            task_type="CAUSAL_LM"))


def adapter_state(model) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, save_embedding_layers=False)  # False: no lookup of the base online
    return {name: tensor.detach().to("cpu").clone() for name, tensor in state.items()}


def state_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 of an adapter's tensors (names, dtypes, shapes and bytes), independent of file format."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def training_state_bytes(model, optimizer) -> int:
    """Bytes of the adapter's training state, counted from the tensors: trainable parameters, their
    gradients and the optimiser's state (AdamW: two moments and a step per parameter)."""
    total = 0
    for parameter in model.parameters():
        if parameter.requires_grad:
            total += parameter.numel() * parameter.element_size()
            if parameter.grad is not None:
                total += parameter.grad.numel() * parameter.grad.element_size()
    for state in optimizer.state.values():
        total += sum(value.numel() * value.element_size() for value in state.values() if torch.is_tensor(value))
    return int(total)


def base_tensor_bytes(model) -> int:
    """Bytes the base holds in its parameters and buffers, adapter tensors left out (4-bit codes and
    their constants included): what a 4-bit base saves is visible here even on a CPU."""
    seen, total = set(), 0
    tensors = [t for name, t in model.named_parameters() if "lora_" not in name] + list(model.buffers())
    for tensor in tensors:
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        total += tensor.numel() * tensor.element_size()
    for module in model.modules():  # bitsandbytes keeps the absmax constants in a quant state
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            nested = getattr(state, "state2", None)
            for value in (state.absmax, None if nested is None else nested.absmax):
                if torch.is_tensor(value):
                    total += value.numel() * value.element_size()
    return int(total)


# ---- one run -----------------------------------------------------------------------------------

def curve_steps(steps: int) -> list[int]:
    """Where the learning curve is measured: every quarter of the run (at least the last step)."""
    return sorted({max(1, round(steps * quarter / 4)) for quarter in (1, 2, 3, 4)})


def undertrained(curve: Mapping) -> dict:
    """`{undertrained, last_quarter_drop}`: the relative fall of the curve's loss over its last
    quarter; undertrained when it exceeds UNDERTRAINED_DROP (None without two points)."""
    losses = curve.get("eval_loss") or []
    if len(losses) < 2:
        return {"undertrained": None, "last_quarter_drop": None}
    drop = (losses[-2] - losses[-1]) / losses[-2]
    return {"undertrained": drop > UNDERTRAINED_DROP, "last_quarter_drop": drop}


def train_run(model, tokenizer, data: TrainData, evaluations: Mapping[str, Sequence], config: TrainConfig, *,
              device: str, checkpoint_step: int | None = None, checkpoint_dir: Path | None = None,
              resume_from: Path | None = None, sample_interval_s: float = 0.25, curve: bool = True) -> dict:
    """Train the adapter-wrapped `model` for `config.steps` steps and measure it.

    `evaluations` maps a name to rendered chats; each is measured at the end (`answer_metrics`), the
    first also at every quarter of the run (the curve; `curve=False` measures the end only). With
    `checkpoint_step`, the whole training state is saved to `checkpoint_dir` after that step (the
    run goes on). With `resume_from`, a checkpoint is loaded first (refused when written for another
    config or other data) and only the steps after it run."""
    from tools.measure.sampler import ResourceSampler, peaks

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: schedule_factor(config.schedule, step, config.steps))
    order = DataOrder({"task": len(data.task), "replay": len(data.replay)}, config.seed)
    counts = {"task": config.batch_size - config.replay_rows, "replay": config.replay_rows}
    first_step = 1
    if resume_from is not None:
        first_step = load_checkpoint(model, optimizer, scheduler, order, Path(resume_from), config, data.sha256) + 1
    names = list(evaluations)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses, times, optimiser_steps, rates = [], [], [], []
    points = {"steps": [], "exact_match": [], "eval_loss": []}
    measured_at = set(curve_steps(config.steps)[:-1]) if names and curve else set()
    model.train()
    with ResourceSampler(interval_s=sample_interval_s, device="cuda" if cuda else "cpu") as sampler:
        for step in range(first_step, config.steps + 1):
            started = time.perf_counter()
            rows = order.batch(counts)
            batch = training_batch([getattr(data, pool)[index] for pool, index in rows], pad_id)
            optimizer.zero_grad(set_to_none=True)
            loss = reply_loss(model, batch, device)
            loss.backward()
            rates.append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
            scheduler.step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
            losses.append(float(loss.detach()))
            optimiser_steps.append(_optimiser_step(optimizer))
            if step in measured_at:
                point = answer_metrics(model, evaluations[names[0]], pad_id, device)
                points["steps"].append(step)
                points["exact_match"].append(point["exact_match"])
                points["eval_loss"].append(point["eval_loss"])
            if checkpoint_step is not None and step == checkpoint_step:
                save_checkpoint(model, optimizer, scheduler, order, Path(checkpoint_dir), step, config, data.sha256)
    samples = sampler.snapshot()
    metrics = {name: answer_metrics(model, rendered, pad_id, device) for name, rendered in evaluations.items()}
    if names and config.steps >= first_step:
        points["steps"].append(config.steps)
        points["exact_match"].append(metrics[names[0]]["exact_match"])
        points["eval_loss"].append(metrics[names[0]]["eval_loss"])
    timed = times[1:] if len(times) > 1 else times
    finite = all(math.isfinite(value) for value in losses) and all(
        math.isfinite(m["eval_loss"]) for m in metrics.values())
    return {
        "status": "ok" if finite else "failed", "error": None if finite else "a loss is not finite",
        "config": config.public(), "data_sha256": data.sha256, "first_step": first_step, "losses": losses,
        "learning_rates": rates, "optimiser_steps": optimiser_steps,
        "step_time_s": sum(timed) / len(timed) if timed else None, "step_times_s": times,
        "metrics": metrics, "curve": {"on": names[0] if names else None, **points}, **undertrained(points),
        "training_state_bytes": training_state_bytes(model, optimizer),
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()) if cuda else None,
        "sampled": peaks(samples), "adapter_sha256": state_sha256(adapter_state(model)),
    }


def base_metrics(model, tokenizer, evaluations: Mapping[str, Sequence], device: str) -> dict:
    """The no-adapter base measured like a run: `{name: answer_metrics}` of every evaluation set."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return {name: answer_metrics(model, rendered, pad_id, device) for name, rendered in evaluations.items()}


def _optimiser_step(optimizer) -> int | None:
    """AdamW's own step counter (the same for every parameter), None before the first step."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(state["step"])
    return None


def random_states() -> dict:
    """torch's (and CUDA's), Python's and NumPy's global random states."""
    import numpy

    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "python": random.getstate(), "numpy": numpy.random.get_state()}


def set_random_states(states: Mapping) -> None:
    import numpy

    torch.set_rng_state(states["torch"])
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    random.setstate(states["python"])
    numpy.random.set_state(states["numpy"])


def save_checkpoint(model, optimizer, scheduler, order: DataOrder, folder: Path, step: int, config: TrainConfig,
                    data_sha256: str) -> dict[str, str]:
    """The whole training state after `step`, as files under `folder` (which must not exist)."""
    folder.mkdir(parents=True, exist_ok=False)
    torch.save(adapter_state(model), folder / CHECKPOINT_FILES[0])
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "data_order": order.state_dict(), "random": random_states()}, folder / CHECKPOINT_FILES[1])
    state = {"step": step, "config": config.public(), "data_sha256": data_sha256,
             "data_order": {"drawn": order.drawn}, "learning_rate": optimizer.param_groups[0]["lr"]}
    (folder / CHECKPOINT_FILES[2]).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    return file_hashes(folder)


def load_checkpoint(model, optimizer, scheduler, order: DataOrder, folder: Path, config: TrainConfig,
                    data_sha256: str) -> int:
    """Load a checkpoint into the run's objects and random generators; returns its step. A
    checkpoint of another configuration or of other data is refused before anything is loaded."""
    from peft import set_peft_model_state_dict

    state = json.loads((folder / CHECKPOINT_FILES[2]).read_text(encoding="utf-8"))
    if state["config"] != config.public():
        raise ConfigError(f"checkpoint {folder.name} was written by another configuration: {state['config']}")
    if state.get("data_sha256") != data_sha256:
        raise ConfigError(f"checkpoint {folder.name} was trained on data {state.get('data_sha256')}, this run has "
                          f"{data_sha256}: a resume on other data is refused (train from the start, or resume on the "
                          "data the checkpoint names)")
    saved = torch.load(folder / CHECKPOINT_FILES[1], weights_only=False)
    set_peft_model_state_dict(model, torch.load(folder / CHECKPOINT_FILES[0], weights_only=True))
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    order.load_state_dict(saved["data_order"])
    set_random_states(saved["random"])
    return int(state["step"])


def export_merged(model, folder: Path) -> dict[str, str]:
    """The base with the adapter merged into its weights (peft's `merge_and_unload` on a copy), saved
    with transformers under `folder` (which must not exist); its config names no machine path.
    Returns the files' sha256."""
    import copy
    import shutil

    folder = Path(folder)
    if folder.exists():
        raise ConfigError(f"{folder} already exists; a merged export is written once")
    merged = copy.deepcopy(model).merge_and_unload()
    merged.config._name_or_path = ""
    temporary = folder.with_name(folder.name + ".partial")
    shutil.rmtree(temporary, ignore_errors=True)
    with no_progress_bars():
        merged.save_pretrained(temporary)
    temporary.rename(folder)
    return file_hashes(folder)


