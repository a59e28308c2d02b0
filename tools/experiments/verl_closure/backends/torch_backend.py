"""The `torch` backend: transformers + peft on CPU or one GPU, each group in this process.

The trainer is a PeftModel (the base model plus one LoRA adapter, float32). The rollout engine is a
separate plain copy of the model that serves merged weights (base + LoRA delta), the way an
inference engine holds its own weights. Releasing the engine frees its weights (moved to the meta
device, so their storage is returned) and empties the allocator cache; there is no KV cache to free,
because Hugging Face `generate` builds its cache inside each call and drops it when the call returns.
Resuming re-allocates the weights on the device and the weight sync writes the trainer's merged
weights. The retain group never releases: the sync writes into the resident weights.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from peft import PeftModel, get_peft_model_state_dict
from peft.tuners.lora import LoraLayer

from tools.errors import ConfigError
from tools.experiments.verl_closure.backends import GroupRun, PreparedModel
from tools.experiments.verl_closure.backends.common import (PromptTokenizer, adapter_hashes, eos_token_ids,
                                                            load_tokenizer, lora_arrays, prepare_model,
                                                            progress_bars)
from tools.experiments.verl_closure.protocol import finish_reason, run_group
from tools.models.loading import load_causal_lm, sampling_generation_kwargs

ENGINE_DESCRIPTION = {
    "engine": "separate transformers model copy serving merged LoRA weights (float32)",
    "release": "engine weights moved to the meta device (storage freed) and the allocator cache emptied; "
               "no KV cache is released: Hugging Face generate keeps none between calls",
    "resume": "engine weights re-allocated on the device (to_empty) and buffers restored; the weight sync "
              "then writes the trainer's merged weights",
    "weight_sync": "the trainer's merged weights copied into the engine; on CUDA the device is synchronised "
                   "before the event closes, so its end time includes the asynchronous copies",
    "sampling": "one batched generate call per phase, seeded with torch.manual_seed(seed); behaviour "
                "log-probs from the processed scores (tools.models.loading.sampling_generation_kwargs)",
    "trainer": "peft LoRA on the base model, AdamW, one token-mean NLL step on the answers",
    "compilation": {"torch_compile": False, "cuda_graphs": False,
                    "note": "eager PyTorch: neither the trainer nor the engine is compiled"},
}

CPU_THREADS = 1
"""Intra-op threads for the tiny model on CPU: it is overhead-bound, and on a shared 2-core machine
OpenMP threads that spin against other processes make a step over 20x slower."""


def device_synchronizer(device: str) -> Callable[[], None]:
    """A function that waits for the device's queued work (CUDA), or does nothing (CPU)."""
    if torch.device(device).type == "cuda":
        return functools.partial(torch.cuda.synchronize, torch.device(device))
    return lambda: None


def sequence_logprobs(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, device: str, pad_id: int,
                      micro_batch: int) -> list[list[float]]:
    """Log-prob of each response token given its prompt and the earlier response tokens.

    Rows are right-padded (prompt then response), so positions are 0..n-1 for every row.
    """
    results: list[list[float]] = []
    for start in range(0, len(pairs), micro_batch):
        chunk = pairs[start:start + micro_batch]
        width = max(len(p) + len(r) for p, r in chunk)
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


class TorchTrainer:
    """The policy: base model + LoRA adapter (trainable), AdamW on the adapter only."""

    def __init__(self, model_path: Path, adapter: Path, config, device: str):
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

    def lora_state(self) -> dict:
        return lora_arrays(get_peft_model_state_dict(self.model).items())

    def logprobs(self, pairs, pad_id: int) -> list[list[float]]:
        self.model.eval()
        with torch.no_grad():
            return sequence_logprobs(self.model, pairs, device=self.device, pad_id=pad_id,
                                     micro_batch=self.config.score_micro_batch)

    def supervised_update(self, examples, pad_id: int) -> dict:
        """One optimizer step on the token-mean NLL of the answer tokens (as verl's sft_loss)."""
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
    """A separate model copy that generates; can release and resume its weights' device memory."""

    def __init__(self, model_path: Path, device: str, tokenizer: PromptTokenizer, response_token_cap: int):
        model, _ = load_causal_lm(model_path, dtype=torch.float32, device=device)
        model.eval()
        model.requires_grad_(False)
        self.model = model
        self.device = device
        self.tokenizer = tokenizer
        self.response_token_cap = response_token_cap
        self._buffers = {name: buffer.detach().to("cpu").clone() for name, buffer in model.named_buffers()}
        self.eos_ids = eos_token_ids(model_path, tokenizer)
        self.state = "loaded"
        self.version: int | None = None

    @property
    def released(self) -> bool:
        return self.state == "released"

    def release(self) -> None:
        self.model.to("meta")
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.state = "released"

    def resume(self, tags: Sequence[str]) -> None:
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

    def generate(self, requests, *, temperature: float, seed: int) -> list[dict]:
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
                                         **sampling_generation_kwargs(temperature, self.response_token_cap),
                                         output_scores=True, return_dict_in_generate=True,
                                         pad_token_id=pad_id, eos_token_id=self.eos_ids)
        tokens = output.sequences[:, width:]
        step_logprobs = [torch.log_softmax(scores.float(), dim=-1).gather(-1, tokens[:, step:step + 1]).squeeze(-1).cpu()
                         for step, scores in enumerate(output.scores)]
        table = torch.stack(step_logprobs, dim=1) if step_logprobs else torch.zeros((len(requests), 0))
        tokens = tokens.cpu()
        samples = []
        for row in range(len(requests)):
            response = [int(t) for t in tokens[row]]
            ends = [i for i, token in enumerate(response) if token in self.eos_ids]
            response = response[:ends[0] + 1] if ends else response
            samples.append({"response_token_ids": response,
                            "behaviour_logprobs": [float(v) for v in table[row, :len(response)]],
                            "finish_reason": finish_reason(response, self.eos_ids, self.response_token_cap),
                            "response_text": self.tokenizer.decode(response), "seed": seed,
                            "engine_version": self.version})
        return samples

    def close(self) -> None:
        self.model = None
        self._buffers = {}


class TorchGroupSession:
    """GroupSession for the torch backend; worker events are stamped with the shared clock."""

    def __init__(self, group: str, config, model_path: Path, adapter: Path, clock: Callable[[], float],
                 log: Callable[[str], None], synchronize: Callable[[], None] | None = None):
        self.group = group
        self.config = config
        self.model_path = model_path
        self.adapter = adapter
        self.clock = clock
        self.log = log
        self.synchronize = synchronize or device_synchronizer(config.device)
        self.events: list[dict] = []
        self.tokenizer: PromptTokenizer | None = None
        self.trainer: TorchTrainer | None = None
        self.engine: TorchRolloutEngine | None = None

    def _event(self, event: str, call: str, start: float, **detail) -> None:
        self.events.append({"event": event, "call": call, "start": start, "end": self.clock(), **detail})

    def initialise(self) -> None:
        self.tokenizer = load_tokenizer(self.model_path)
        self.trainer = TorchTrainer(self.model_path, self.adapter, self.config, self.config.device)
        self.engine = TorchRolloutEngine(self.model_path, self.config.device, self.tokenizer,
                                         self.config.response_token_cap)
        self.log(f"trainer: {len(self.trainer.parameters)} trainable tensors; engine eos ids {self.engine.eos_ids}")

    def release_engine(self) -> None:
        start = self.clock()
        self.engine.release()
        self._event("engine_release", "TorchRolloutEngine.release", start, tags=["weights"])

    def weight_sync(self, version: int) -> None:
        if self.engine.released:
            start = self.clock()
            self.engine.resume(["weights"])
            self.synchronize()
            self._event("engine_resume", "TorchRolloutEngine.resume", start, tags=["weights"])
        start = self.clock()
        written = self.engine.load_weights(self.trainer.merged_state_dict(), version)
        self.synchronize()  # the copies are asynchronous on CUDA: the event ends when they are done
        self._event("weight_sync", "TorchRolloutEngine.load_weights", start, tags=None, tensors=written,
                    version=version)

    def generate(self, requests) -> list[dict]:
        return self.engine.generate(requests, temperature=self.config.temperature,
                                    seed=requests[0].seed if requests else self.config.sampling_seed)

    def trainer_logprobs(self, rollouts) -> list[list[float]]:
        pairs = [(r["prompt_token_ids"], r["response_token_ids"]) for r in rollouts]
        return self.trainer.logprobs(pairs, self.tokenizer.pad_id)

    def supervised_update(self, examples) -> dict:
        return self.trainer.supervised_update(examples, self.tokenizer.pad_id)

    def lora_state(self) -> dict:
        return self.trainer.lora_state()

    def trainer_version(self) -> int:
        return self.trainer.version

    def engine_version(self) -> int | None:
        return self.engine.version

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.trainer = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class TorchBackend:
    """transformers + peft in this process (see the module docstring)."""

    name = "torch"
    parent_uses_cuda = True

    def prepare(self, config, workspace: Path) -> PreparedModel:
        return prepare_model(config, workspace)

    @contextlib.contextmanager
    def runtime_context(self, config) -> Iterator[dict]:
        """Quiet model loading unless asked; one CPU thread for the tiny model on CPU (restored after)."""
        previous = torch.get_num_threads()
        threads = CPU_THREADS if config.device == "cpu" and config.model == "tiny" else previous
        torch.set_num_threads(threads)
        try:
            with progress_bars(config.progress):
                yield {"torch_threads": threads}
        finally:
            torch.set_num_threads(previous)

    def group_overrides(self, config, group: str, model: PreparedModel) -> None:
        return None

    def execute_group(self, run: GroupRun) -> dict:
        session = TorchGroupSession(run.group, run.config, run.model.path, run.adapter, run.clock, run.log)
        started = time.monotonic()
        try:
            result = run_group(session, group=run.group, requests=run.requests, probe_requests=run.probe_requests,
                               examples=run.examples, tasks=run.tasks, frozen=run.frozen,
                               drift_threshold=run.config.behaviour_drift_threshold, clock=run.clock, log=run.log)
        finally:
            session.close()
        run.log(f"group {run.group} finished in {time.monotonic() - started:.1f} s")
        return result

    def details(self, config, model: PreparedModel) -> dict:
        return {**ENGINE_DESCRIPTION, **adapter_hashes(model)}


BACKEND = TorchBackend()
