"""The chain's training runs: one LoRA adapter on the admitted data, resumable, measured.

Projects 63, 65 and 62 train the same way, so their candidates differ only in what they compare
(the rank, the base precision): the base model (the lab model in cpu_smoke; Qwen2.5-0.5B-Instruct
from the local cache or `random_init` on CUDA) in float32, bfloat16 or NF4 (transformers'
`BitsAndBytesConfig`, bitsandbytes' `Linear4bit`), a peft LoRA adapter initialised from the run's
seed, AdamW over the adapter, a fixed number of steps over batches drawn in a seed-fixed order, the
loss on the reply tokens only. It measures what the gates read: the evaluation on the frozen split
(teacher-forced exact match of the whole reply, the accuracy of its tokens, the reply loss), the step time (the first step
is warm-up and not timed), the training state held by the tensors (adapter parameters, gradients,
AdamW moments) and, on CUDA, the allocator's peaks and the 0.25 s device sampler (None on a CPU).

A run can save a checkpoint after step k (adapter, optimiser state, step) and a later process can
resume it: the optimiser's step counter and the batch order continue where they stopped, so the
resumed losses are the uninterrupted run's (project 62 checks exactly that).
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

IGNORE_INDEX = -100
BASES = ("float32", "bfloat16", "nf4")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "nf4": torch.bfloat16}
CHECKPOINT_FILES = ("adapter_state.pt", "optimizer.pt", "trainer_state.json")
QUALITY_METRICS = {
    "exact_match": "teacher-forced exact match of the whole reply on 64's frozen evaluation split",
    "token_accuracy": "teacher-forced accuracy of the reply tokens (answer digits and end of turn) on 64's frozen "
                      "evaluation split",
}
"""What a gate may read as quality. In cpu_smoke the lab model does not learn the new operation's whole
answers in a few dozen adapter steps (exact match stays at a few of the 48 problems, which is noise),
while its reply tokens move with training (accuracy about 0.29 before, about 0.4 after): cpu_smoke gates
read `token_accuracy`, real_gpu gates `exact_match`."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides one training run (its `public()` is what comparability reads)."""

    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    steps: int = 30
    batch_size: int = 16
    learning_rate: float = 2e-3
    seed: int = 1
    base: str = "float32"
    max_length: int = 64

    def __post_init__(self) -> None:
        for name in ("rank", "steps", "batch_size", "seed", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed" else 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.base not in BASES:
            raise ConfigError(f"base must be one of {BASES}, got {self.base!r}")
        for name in ("alpha", "learning_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
        if not self.target_modules:
            raise ConfigError("target_modules must name at least one module")

    def public(self) -> dict:
        data = asdict(self)
        data["target_modules"] = list(self.target_modules)
        return data


@contextlib.contextmanager
def one_thread_on_cpu(device: str):
    """torch at one thread on a CPU for the duration (the lab and tiny models' matrices are too small to
    gain from a second thread, and on a shared machine the threads only wait for each other)."""
    before = torch.get_num_threads()
    if not str(device).startswith("cuda"):
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    with _no_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    if base != "nf4":
        model = model.to(device)
    model.config.use_cache = False
    return model, tokenizer, model_identity(folder)


@contextlib.contextmanager
def _no_progress_bars():
    """transformers' weight-loading bar off while a base loads (a notebook would show it as a widget)."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()


def render(tokenizer, prompt: str, reply: str) -> tuple[list[int], int]:
    """`(ids, prompt_length)` of a chat whose assistant turn is `reply`, ending with its end-of-turn
    token (the newline after it is never predicted)."""
    def ids(encoded):
        return list(getattr(encoded, "input_ids", encoded))

    head = ids(tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=True))
    full = ids(tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": reply}], tokenize=True))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if full[:len(head)] != head or end not in full[len(head):]:
        raise ConfigError("the chat template does not extend the prompt with the reply and its end of turn")
    return full[:full.index(end, len(head)) + 1], len(head)


def batch_order(count: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """The example indices of every step: seed-fixed permutations, one after another."""
    rng, order, plan = random.Random(seed), [], []
    for _ in range(steps):
        chunk = []
        while len(chunk) < batch_size:
            if not order:
                order = list(range(count))
                rng.shuffle(order)
            chunk.append(order.pop())
        plan.append(chunk)
    return plan


def reply_loss(model, batch: Mapping, device) -> torch.Tensor:
    """Mean cross-entropy over the supervised (reply) tokens of a batch."""
    logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits
    labels = batch["labels"].to(device)[:, 1:]
    logits = logits[:, :-1].float()
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX)


def evaluate(model, rendered: Sequence[tuple[list[int], int]], pad_id: int, device, batch_size: int = 64) -> dict:
    """Reply loss (token mean) and teacher-forced exact match (every reply token is the argmax given
    the correct prefix: the greedy answer of the whole reply, up to ties) over `rendered`."""
    was_training = model.training
    model.eval()
    loss_sum, tokens, exact, right_tokens = 0.0, 0, 0, 0
    with torch.no_grad():
        for start in range(0, len(rendered), batch_size):
            batch = training_batch(rendered[start:start + batch_size], pad_id)
            logits = model(input_ids=batch["input_ids"].to(device),
                           attention_mask=batch["attention_mask"].to(device)).logits[:, :-1].float()
            labels = batch["labels"].to(device)[:, 1:]
            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                              ignore_index=IGNORE_INDEX, reduction="sum"))
            tokens += int((labels != IGNORE_INDEX).sum())
            right = (logits.argmax(-1) == labels) | (labels == IGNORE_INDEX)
            exact += int(right.all(dim=1).sum())
            right_tokens += int((right & (labels != IGNORE_INDEX)).sum())
    model.train(was_training)
    return {"eval_loss": loss_sum / tokens, "exact_match": exact / len(rendered), "token_accuracy": right_tokens / tokens,
            "examples": len(rendered)}


# ---- the adapter -------------------------------------------------------------------------------

def attach_adapter(model, config: TrainConfig):
    """The model wrapped with a LoRA adapter initialised from the run's seed; the base is frozen."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(config.seed)
    return get_peft_model(model, LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0,
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

def train_run(model, tokenizer, train_rendered: Sequence, eval_rendered: Sequence, config: TrainConfig, *,
              device: str, checkpoint_step: int | None = None, checkpoint_dir: Path | None = None,
              resume_from: Path | None = None, sample_interval_s: float = 0.25) -> dict:
    """Train the adapter-wrapped `model` for `config.steps` steps and measure it.

    With `checkpoint_step`, the adapter, the optimiser state and the step are saved to
    `checkpoint_dir` after that step (the run goes on). With `resume_from`, the adapter and the
    optimiser state are loaded from a checkpoint first and only the steps after it run."""
    from tools.measure.sampler import ResourceSampler, peaks

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    plan = batch_order(len(train_rendered), config.batch_size, config.steps, config.seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    first_step = 1
    if resume_from is not None:
        first_step = load_checkpoint(model, optimizer, Path(resume_from), config) + 1
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses, times, optimiser_steps = [], [], []
    model.train()
    with ResourceSampler(interval_s=sample_interval_s, device="cuda" if cuda else "cpu") as sampler:
        for step in range(first_step, config.steps + 1):
            started = time.perf_counter()
            batch = training_batch([train_rendered[index] for index in plan[step - 1]], pad_id)
            optimizer.zero_grad(set_to_none=True)
            loss = reply_loss(model, batch, device)
            loss.backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
            losses.append(float(loss.detach()))
            optimiser_steps.append(_optimiser_step(optimizer))
            if checkpoint_step is not None and step == checkpoint_step:
                save_checkpoint(model, optimizer, Path(checkpoint_dir), step, config)
    samples = sampler.snapshot()
    evaluation = evaluate(model, eval_rendered, pad_id, device)
    timed = times[1:] if len(times) > 1 else times
    finite = all(math.isfinite(value) for value in losses + [evaluation["eval_loss"]])
    return {
        "status": "ok" if finite else "failed", "error": None if finite else "a loss is not finite",
        "config": config.public(), "first_step": first_step, "losses": losses, "optimiser_steps": optimiser_steps,
        "step_time_s": sum(timed) / len(timed), "step_times_s": times, **evaluation,
        "training_state_bytes": training_state_bytes(model, optimizer),
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()) if cuda else None,
        "sampled": peaks(samples), "adapter_sha256": state_sha256(adapter_state(model)),
    }


def _optimiser_step(optimizer) -> int | None:
    """AdamW's own step counter (the same for every parameter), None before the first step."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(state["step"])
    return None


def save_checkpoint(model, optimizer, folder: Path, step: int, config: TrainConfig) -> dict[str, str]:
    """Adapter tensors, optimiser state and the step, as files under `folder` (which must not exist)."""
    folder.mkdir(parents=True, exist_ok=False)
    torch.save(adapter_state(model), folder / CHECKPOINT_FILES[0])
    torch.save(optimizer.state_dict(), folder / CHECKPOINT_FILES[1])
    (folder / CHECKPOINT_FILES[2]).write_text(json.dumps({"step": step, "config": config.public()}, indent=2) + "\n",
                                              encoding="utf-8")
    return file_hashes(folder)


def load_checkpoint(model, optimizer, folder: Path, config: TrainConfig) -> int:
    """Load a checkpoint into `model` and `optimizer`; returns its step. A checkpoint of another
    configuration is refused."""
    from peft import set_peft_model_state_dict

    state = json.loads((folder / CHECKPOINT_FILES[2]).read_text(encoding="utf-8"))
    if state["config"] != config.public():
        raise ConfigError(f"checkpoint {folder} was written by another configuration: {state['config']}")
    set_peft_model_state_dict(model, torch.load(folder / CHECKPOINT_FILES[0], weights_only=True))
    optimizer.load_state_dict(torch.load(folder / CHECKPOINT_FILES[1], weights_only=True))
    return int(state["step"])


def save_adapter(model, folder: Path, base_model: str) -> dict[str, str]:
    """The adapter in peft's format under `folder` (which must not exist), written to a temporary folder
    and renamed into place; its config names the base by model id, never by a machine path.
    Returns the files' sha256."""
    import shutil

    folder = Path(folder)
    if folder.exists():
        raise ConfigError(f"{folder} already exists; an adapter folder is written once")
    for config in model.peft_config.values():
        config.base_model_name_or_path = base_model
    temporary = folder.with_name(folder.name + ".partial")
    shutil.rmtree(temporary, ignore_errors=True)
    model.save_pretrained(temporary, save_embedding_layers=False)  # no lookup of the base model online
    temporary.rename(folder)
    return file_hashes(folder)


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`, by path relative to it."""
    from tools.core.records import sha256_file

    return {path.relative_to(folder).as_posix(): sha256_file(path)
            for path in sorted(Path(folder).rglob("*")) if path.is_file()}
