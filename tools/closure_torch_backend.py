"""The `torch` backend of the shared verl experiment: transformers + peft on CPU or one GPU.

The trainer is a PeftModel (the base model plus one LoRA adapter, float32). The rollout engine
is a separate plain copy of the model that serves merged weights (base + LoRA delta), the way an
inference engine holds its own weights. Releasing the engine frees its weights (moved to the
meta device, so their storage is returned) and empties the allocator cache; resuming
re-allocates them on the device and the weight sync writes the trainer's merged weights. The
retain group never releases: the sync writes into the resident weights.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tools.errors import ConfigError
from tools.core.records import sha256_file

ENGINE_DESCRIPTION = {
    "engine": "separate transformers model copy serving merged LoRA weights (float32)",
    "release": "engine weights moved to the meta device (storage freed) and the allocator cache emptied",
    "resume": "engine weights re-allocated on the device (to_empty) and buffers restored; the weight sync "
              "then writes the trainer's merged weights",
    "sampling": "one batched generate call per phase, seeded with torch.manual_seed(seed); behaviour "
                "log-probs from the processed scores (tools.models.loading.sampling_generation_kwargs)",
    "trainer": "peft LoRA on the base model, AdamW, one token-mean NLL step on the answers",
}


# ---------------------------------------------------------------------------
# Model, tokenizer, adapter
# ---------------------------------------------------------------------------

def resolve_model_path(config) -> Path:
    from tools.models.loading import resolve_model

    return Path(resolve_model(config.model, source=config.model_source, cache_dir=config.model_cache))


def model_identity_for(path: Path) -> dict:
    from tools.models.loading import model_identity

    return model_identity(path)


class PromptTokenizer:
    """Chat-formats prompts and tokenises answers the same way for sampling and training."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        if tokenizer.eos_token_id is None:
            raise ConfigError("the tokenizer has no eos token; the answer's end of turn cannot be marked")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def prompt_ids(self, prompt: str) -> list[int]:
        if self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      add_generation_prompt=True, tokenize=False)
        else:
            text = prompt
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def answer_ids(self, answer: str) -> list[int]:
        return list(self.tokenizer(answer, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def load_tokenizer(path: Path) -> PromptTokenizer:
    from transformers import AutoTokenizer

    return PromptTokenizer(AutoTokenizer.from_pretrained(path))


def initial_adapter(model_path: Path, config, seed: int, workspace: Path) -> Path:
    """Write (once per seed) the initial LoRA adapter that a group loads; same seed, same adapter."""
    import torch
    from peft import LoraConfig, get_peft_model

    from tools.models.loading import load_causal_lm

    folder = Path(workspace) / f"initial_lora_seed{seed}"
    if (folder / "adapter_config.json").is_file():
        return folder
    base, _ = load_causal_lm(model_path, dtype=torch.float32, device="cpu")
    torch.manual_seed(seed)
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=list(config.lora_target_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    get_peft_model(base, lora).save_pretrained(folder)
    del base
    gc.collect()
    return folder


def adapter_sha256(folder: Path) -> str | None:
    weights = Path(folder) / "adapter_model.safetensors"
    return sha256_file(weights) if weights.is_file() else None


def details(config, adapters: Mapping[str, Path]) -> dict:
    return {**ENGINE_DESCRIPTION, "initial_adapter_sha256": {g: adapter_sha256(p) for g, p in adapters.items()}}


def cleanup_workspace(workspace: Path) -> None:
    shutil.rmtree(workspace, ignore_errors=False)


CPU_THREADS = 1
"""Intra-op threads for the tiny model on CPU: it is overhead-bound, and on a shared 2-core machine
OpenMP threads that spin against other processes make a step over 20x slower."""


@contextlib.contextmanager
def runtime_context(config):
    """Limit torch's CPU threads for a tiny-model CPU run; restores the previous setting afterwards."""
    import torch

    if config.device != "cpu" or config.model != "tiny":
        yield {"torch_threads": torch.get_num_threads()}
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(CPU_THREADS)
    try:
        yield {"torch_threads": CPU_THREADS}
    finally:
        torch.set_num_threads(previous)


# ---------------------------------------------------------------------------
# Tensors
# ---------------------------------------------------------------------------

def tensor_digest(tensor) -> dict:
    """dtype, shape and sha256 of a tensor's float32 CPU bytes."""
    import torch

    data = tensor.detach().to("cpu", torch.float32).contiguous()
    return {"dtype": "float32", "shape": list(data.shape),
            "sha256": hashlib.sha256(data.numpy().tobytes()).hexdigest()}


def normalise_lora_name(name: str) -> str:
    """peft state-dict name without the wrapper prefix and adapter name (comparable across backends)."""
    return name.removeprefix("base_model.model.").replace(".default", "")


def sequence_logprobs(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, device: str, pad_id: int,
                      micro_batch: int) -> list[list[float]]:
    """Log-prob of each response token given its prompt and the earlier response tokens.

    Rows are right-padded (prompt then response), so positions are 0..n-1 for every row.
    """
    import torch

    results: list[list[float]] = []
    for start in range(0, len(pairs), micro_batch):
        chunk = pairs[start:start + micro_batch]
        lengths = [len(p) + len(r) for p, r in chunk]
        width = max(lengths)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (prompt, response) in enumerate(chunk):
            sequence = list(prompt) + list(response)
            ids[row, :len(sequence)] = torch.tensor(sequence, dtype=torch.long)
            mask[row, :len(sequence)] = 1
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        for row, (prompt, response) in enumerate(chunk):
            first = len(prompt) - 1
            results.append(logp[row, first:first + len(response)].cpu().tolist())
    return results


# ---------------------------------------------------------------------------
# Trainer and engine
# ---------------------------------------------------------------------------

class TorchTrainer:
    """The policy: base model + LoRA adapter (trainable), AdamW on the adapter only."""

    def __init__(self, model_path: Path, adapter: Path, config, device: str):
        import torch
        from peft import PeftModel

        from tools.models.loading import load_causal_lm

        base, _ = load_causal_lm(model_path, dtype=torch.float32, device="cpu")
        self.model = PeftModel.from_pretrained(base, str(adapter), is_trainable=True).to(device)
        self.model.eval()
        self.device = device
        self.config = config
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        if not self.parameters:
            raise RuntimeError(f"adapter {adapter} loaded without trainable parameters")
        self.optimizer = torch.optim.AdamW(self.parameters, lr=config.learning_rate, weight_decay=config.weight_decay,
                                           betas=(0.9, 0.999))
        self.version = 0

    def lora_digests(self) -> dict[str, dict]:
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model)
        return {normalise_lora_name(name): tensor_digest(tensor) for name, tensor in state.items()}

    def logprobs(self, pairs, pad_id: int) -> list[list[float]]:
        import torch

        self.model.eval()
        with torch.no_grad():
            return sequence_logprobs(self.model, pairs, device=self.device, pad_id=pad_id,
                                     micro_batch=self.config.score_micro_batch)

    def supervised_update(self, examples, pad_id: int) -> dict:
        """One optimizer step on the token-mean NLL of the answer tokens (as verl's sft_loss)."""
        import torch

        self.model.train()
        width = max(len(e.prompt_token_ids) + len(e.target_token_ids) for e in examples)
        ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        loss_mask = torch.zeros_like(ids, dtype=torch.float32)
        for row, example in enumerate(examples):
            sequence = list(example.prompt_token_ids) + list(example.target_token_ids)
            ids[row, :len(sequence)] = torch.tensor(sequence)
            attention[row, :len(sequence)] = 1
            loss_mask[row, len(example.prompt_token_ids):len(sequence)] = 1.0
        ids, attention, loss_mask = ids.to(self.device), attention.to(self.device), loss_mask.to(self.device)
        logits = self.model(input_ids=ids, attention_mask=attention).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        target = loss_mask[:, 1:]
        tokens = target.sum()
        loss = -(logp * target).sum() / tokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        self.version += 1
        return {"loss": float(loss.detach()), "grad_norm": float(grad_norm), "learning_rate": self.config.learning_rate,
                "target_tokens": int(tokens.item()), "examples": len(examples),
                "loss_fn": "token-mean NLL of the answer tokens (verl sft_loss semantics)"}

    def merged_state_dict(self) -> dict:
        """Full weights for the engine: base weights with each LoRA delta added (plain-model names)."""
        import torch
        from peft.tuners.lora import LoraLayer

        base = self.model.get_base_model()
        state = {}
        with torch.no_grad():
            for name, tensor in base.state_dict().items():
                if "lora_" in name:
                    continue
                state[name.replace(".base_layer", "")] = tensor.detach()
            for module_name, module in base.named_modules():
                if isinstance(module, LoraLayer):
                    key = f"{module_name}.weight"
                    state[key] = state[key] + module.get_delta_weight("default")
        return state


class TorchRolloutEngine:
    """A separate model copy that generates; can release and resume its device memory."""

    def __init__(self, model_path: Path, device: str, tokenizer: PromptTokenizer):
        import torch

        from tools.models.loading import load_causal_lm

        model, _ = load_causal_lm(model_path, dtype=torch.float32, device=device)
        model.eval()
        model.requires_grad_(False)
        self.model = model
        self.device = device
        self.tokenizer = tokenizer
        self._buffers = {name: buffer.detach().to("cpu").clone() for name, buffer in model.named_buffers()}
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, (list, tuple)) else [eos]
        self.eos_ids = sorted({int(t) for t in eos if t is not None} | {int(tokenizer.tokenizer.eos_token_id)})
        self.state = "loaded"
        self.version: int | None = None

    @property
    def released(self) -> bool:
        return self.state == "released"

    def release(self) -> None:
        import torch

        self.model.to("meta")
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.state = "released"

    def resume(self, tags: Sequence[str]) -> None:
        import torch

        if list(tags) != ["weights"]:
            raise ConfigError(f"the torch engine resumes only 'weights', got {list(tags)}")
        if not self.released:
            raise RuntimeError("resume called on an engine that is not released")
        self.model.to_empty(device=self.device)
        self.model.tie_weights()  # moving to meta unties shared tensors (e.g. lm_head / embed_tokens)
        with torch.no_grad():
            for name, buffer in self.model.named_buffers():
                buffer.copy_(self._buffers[name].to(buffer.device))
        self.state = "resumed_unsynced"

    def load_weights(self, state: Mapping[str, Any], version: int) -> int:
        """Copy every parameter from `state` (plain-model names); returns the tensor count written."""
        import torch

        if self.released:
            raise RuntimeError("weights cannot be loaded into a released engine; resume it first")
        written = 0
        with torch.no_grad():
            for name, parameter in self.model.named_parameters():
                if name not in state:
                    raise KeyError(f"weight sync has no tensor for engine parameter {name}")
                parameter.copy_(state[name].to(parameter.device, parameter.dtype))
                written += 1
        self.version = int(version)
        self.state = "serving"
        return written

    def generate(self, requests, *, temperature: float, max_new_tokens: int, seed: int) -> list[dict]:
        import torch

        from tools.models.loading import sampling_generation_kwargs

        if self.state != "serving":
            raise RuntimeError(f"engine cannot generate in state {self.state!r}; sync weights first")
        pad_id = self.tokenizer.pad_id
        width = max(len(r.prompt_token_ids) for r in requests)
        ids = torch.full((len(requests), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, request in enumerate(requests):
            n = len(request.prompt_token_ids)
            ids[row, width - n:] = torch.tensor(request.prompt_token_ids)
            mask[row, width - n:] = 1
        torch.manual_seed(seed)
        with torch.no_grad():
            output = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                         **sampling_generation_kwargs(temperature, max_new_tokens),
                                         output_scores=True, return_dict_in_generate=True,
                                         pad_token_id=pad_id, eos_token_id=self.eos_ids)
        tokens = output.sequences[:, width:]
        step_logprobs = []
        for step, scores in enumerate(output.scores):
            logp = torch.log_softmax(scores.float(), dim=-1)
            step_logprobs.append(logp.gather(-1, tokens[:, step:step + 1]).squeeze(-1).cpu())
        logprob_table = torch.stack(step_logprobs, dim=1) if step_logprobs else torch.zeros((len(requests), 0))
        tokens = tokens.cpu()
        samples = []
        for row in range(len(requests)):
            response, logprobs, finish = [], [], "length"
            for step in range(tokens.shape[1]):
                token = int(tokens[row, step])
                response.append(token)
                logprobs.append(float(logprob_table[row, step]))
                if token in self.eos_ids:
                    finish = "stop"
                    break
            samples.append({"response_token_ids": response, "behaviour_logprobs": logprobs, "finish_reason": finish,
                            "response_text": self.tokenizer.decode(response), "seed": seed})
        return samples

    def close(self) -> None:
        self.model = None
        self._buffers = {}


# ---------------------------------------------------------------------------
# Group session
# ---------------------------------------------------------------------------

class TorchGroupSession:
    """GroupSession for the torch backend; worker events are stamped with the shared clock."""

    def __init__(self, group: str, config, model_path: Path, adapter: Path, clock: Callable[[], float],
                 log: Callable[[str], None]):
        self.group = group
        self.config = config
        self.model_path = model_path
        self.adapter = adapter
        self.clock = clock
        self.log = log
        self.events: list[dict] = []
        self.tokenizer: PromptTokenizer | None = None
        self.trainer: TorchTrainer | None = None
        self.engine: TorchRolloutEngine | None = None

    def _event(self, event: str, call: str, start: float, **detail) -> None:
        self.events.append({"event": event, "call": call, "start": start, "end": self.clock(), **detail})

    def initialise(self) -> None:
        self.tokenizer = load_tokenizer(self.model_path)
        self.trainer = TorchTrainer(self.model_path, self.adapter, self.config, self.config.device)
        self.engine = TorchRolloutEngine(self.model_path, self.config.device, self.tokenizer)
        self.log(f"trainer: {len(self.trainer.parameters)} trainable tensors; engine eos ids {self.engine.eos_ids}")

    def release_engine(self) -> None:
        start = self.clock()
        self.engine.release()
        self._event("engine_release", "TorchRolloutEngine.release", start, tags=["weights", "kv_cache"])

    def weight_sync(self, version: int) -> None:
        if self.engine.released:
            start = self.clock()
            self.engine.resume(["weights"])
            self._event("engine_resume", "TorchRolloutEngine.resume", start, tags=["weights"])
        start = self.clock()
        written = self.engine.load_weights(self.trainer.merged_state_dict(), version)
        self._event("weight_sync", "TorchRolloutEngine.load_weights", start, tags=None, tensors=written,
                    version=version)

    def generate(self, requests) -> list[dict]:
        return self.engine.generate(requests, temperature=self.config.temperature,
                                    max_new_tokens=self.config.response_token_cap,
                                    seed=requests[0].seed if requests else self.config.sampling_seed)

    def trainer_logprobs(self, rollouts) -> list[list[float]]:
        pairs = [(r["prompt_token_ids"], r["response_token_ids"]) for r in rollouts]
        return self.trainer.logprobs(pairs, self.tokenizer.pad_id)

    def supervised_update(self, examples) -> dict:
        return self.trainer.supervised_update(examples, self.tokenizer.pad_id)

    def lora_digests(self) -> dict[str, dict]:
        return self.trainer.lora_digests()

    def trainer_version(self) -> int:
        return self.trainer.version

    def engine_version(self) -> int | None:
        return self.engine.version

    def close(self) -> None:
        import torch

        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.trainer = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def execute_group(*, group: str, config, model_path: Path, adapter: Path, overrides, requests, probe_requests,
                  examples, tasks, frozen, clock, log, workspace: Path) -> dict:
    """Run one group in this process with the torch backend."""
    from tools.closure_protocol import run_group

    session = TorchGroupSession(group, config, model_path, adapter, clock, log)
    started = time.monotonic()
    try:
        result = run_group(session, group=group, requests=requests, probe_requests=probe_requests, examples=examples,
                           tasks=tasks, frozen=frozen, config=config, clock=clock, log=log)
    finally:
        session.close()
    log(f"group {group} finished in {time.monotonic() - started:.1f} s")
    return result
