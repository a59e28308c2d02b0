"""The `verl` backend: verl 0.9.1 on one GPU (PT-VERL-CUDA profile).

Each group runs in its own process (`python -m tools.experiments.verl_closure.backends.verl_backend
--spec S --result R`), so the two groups never share a Ray cluster or a vLLM engine; the parent
samples memory and tees the group's output into `<label>_<group>.log`. Inside, the pieces are the
ones verl's `RayPPOTrainer.init_workers` builds, minus reward, critic and reference roles:

- the actor/rollout worker group (`ActorRolloutRefWorker`, here `verl_worker.ClosureActorRolloutWorker`),
  with `set_loss_fn(verl.workers.utils.losses.sft_loss)` for the supervised update;
- `LLMServerManager` (vLLM async servers in hybrid mode) and its token-in/token-out client, asked for
  log-probs (the behaviour log-probs of the rollouts) and reporting the policy version each output
  was generated with (`extra_fields["global_steps"]`);
- `CheckpointEngineManager`: `sleep_replicas` releases the engine, `update_weights` syncs the actor's
  weights into it (resuming weights and KV cache when `free_cache_engine` is set).

verl, ray and vLLM are imported inside the session's methods only: they exist only in the PT-VERL-CUDA
environment (and a test injects stand-ins for them), while the parent side and the course
environment import this module without them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from tools.core.environment import installed_version
from tools.core.paths import resolve_project_root
from tools.data.arithmetic import build_task_pool
from tools.experiments.verl_closure.backends import GroupRun, PreparedModel
from tools.experiments.verl_closure.backends.common import (adapter_hashes, eos_token_ids, load_lora_tensors,
                                                            load_tokenizer, prepare_model, progress_bars,
                                                            save_lora_tensors)
from tools.experiments.verl_closure.config import ClosureConfig
from tools.experiments.verl_closure.overrides import compose_verl_config, overrides_for_config
from tools.experiments.verl_closure.protocol import Request, SupervisedExample, finish_reason, run_group
from tools.models.vocabulary import require_vocabulary_alignment

CHILD_MODULE = "tools.experiments.verl_closure.backends.verl_backend"

ENGINE_DESCRIPTION = {
    "engine": "vLLM async server in hybrid mode (verl LLMServerManager), LoRA served as an adapter",
    "release": "CheckpointEngineManager.sleep_replicas -> vLLMHttpServer.sleep (level 1 with a LoRA adapter, "
               "else 2; a no-op when free_cache_engine is false, so it is only called in the release group)",
    "resume": "ServerAdapter.resume(tags) inside ActorRolloutRefWorker.update_weights (weights, then kv_cache), "
              "gated by free_cache_engine",
    "weight_sync": "CheckpointEngineManager.update_weights(global_steps=version); the engine then reports that "
                   "version on every output (extra_fields['global_steps'])",
    "sampling": "one request per sample through LLMServerClient.generate, per-request seed, logprobs on; the "
                "finish reason comes from the token count and every end-of-sequence id of the generation config",
    "trainer": "FSDP actor, ActorRolloutRefWorker.update_actor with sft_loss (one mini-batch, one epoch)",
}


# ---------------------------------------------------------------------------
# Parent side: one process per group
# ---------------------------------------------------------------------------

def group_spec(run: GroupRun) -> dict:
    """What a group process needs, as JSON."""
    return {
        "group": run.group,
        "config": run.config.public(),
        "model_path": str(run.model.path),
        "overrides": list(run.overrides),
        "requests": [dataclasses.asdict(r) for r in run.requests],
        "probe_requests": [dataclasses.asdict(r) for r in run.probe_requests],
        "examples": [dataclasses.asdict(e) for e in run.examples],
        "frozen": None if run.frozen is None else list(run.frozen),
    }


def child_command(spec_path: Path, result_path: Path) -> list[str]:
    return [sys.executable, "-m", CHILD_MODULE, "--spec", str(spec_path), "--result", str(result_path)]


class VerlBackend:
    """verl 0.9.1, one child process per group (see the module docstring)."""

    name = "verl"
    parent_uses_cuda = False  # the groups' processes use the GPU; this one must not hold a CUDA context

    def prepare(self, config: ClosureConfig, workspace: Path) -> PreparedModel:
        """The model, its tokenizer and adapters; ConfigError when the tokenizer and the vocabulary
        disagree (vLLM would mask part of the vocabulary the actor normalises over)."""
        return prepare_model(config, workspace, check_model=require_vocabulary_alignment)

    @contextlib.contextmanager
    def runtime_context(self, config: ClosureConfig) -> Iterator[dict]:
        with progress_bars(config.progress):
            yield {}

    def group_overrides(self, config: ClosureConfig, group: str, model: PreparedModel) -> list[str]:
        return overrides_for_config(config, group, model.path, model.adapters[group])

    def execute_group(self, run: GroupRun) -> dict:
        """Run one group in a child process and return its measurements (with its LoRA tensors).

        The child stamps events with time.monotonic, the machine-wide clock; `run.clock` must be that
        clock for the stage events to line up with the parent's resource samples.
        """
        if run.clock is not time.monotonic:
            raise ValueError("the verl backend needs clock=time.monotonic (events come from other processes)")
        spec_path = Path(run.workspace) / f"spec_{run.group}.json"
        result_path = Path(run.workspace) / f"result_{run.group}.json"
        spec_path.write_text(json.dumps(group_spec(run)), encoding="utf-8")
        root = resolve_project_root()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
                   PYTHONUNBUFFERED="1")
        command = child_command(spec_path, result_path)
        run.log("launching: " + " ".join(command))
        with subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              encoding="utf-8", errors="replace") as process:
            for line in process.stdout:
                run.log(line.rstrip("\n"))
            code = process.wait()
        if code != 0 or not result_path.is_file():
            raise RuntimeError(f"verl group {run.group} failed (exit code {code}); the traceback is in the group log")
        return read_child_result(result_path)

    def details(self, config: ClosureConfig, model: PreparedModel) -> dict:
        return {**ENGINE_DESCRIPTION, **adapter_hashes(model),
                "compilation": {"rollout.enforce_eager": config.rollout_enforce_eager,
                                "actor.use_torch_compile": config.actor_torch_compile,
                                "note": "vLLM without torch.compile or CUDA graphs; the FSDP actor's helpers "
                                        "not compiled (each group starts fresh processes)"},
                "versions": {name: installed_version(name) for name in ("verl", "vllm", "ray", "torch")}}


BACKEND = VerlBackend()


# ---------------------------------------------------------------------------
# Child side: the verl session
# ---------------------------------------------------------------------------

class VerlGroupSession:
    """GroupSession on verl 0.9.1: worker group, vLLM servers and checkpoint engine of one group."""

    def __init__(self, group: str, config: ClosureConfig, model_path: Path, overrides: Sequence[str],
                 clock: Callable[[], float], log: Callable[[str], None]):
        self.group = group
        self.config = config
        self.model_path = Path(model_path)
        self.overrides = list(overrides)
        self.clock = clock
        self.log = log
        self.events: list[dict] = []
        self.tokenizer = load_tokenizer(self.model_path)
        self.eos_ids = eos_token_ids(self.model_path, self.tokenizer)
        self._trainer_version = 0
        self._engine_version: int | None = None
        self._resume_seen = 0
        self.cfg = None
        self.wg = None
        self.servers = None
        self.client = None
        self.checkpoints = None

    # -- lifecycle ---------------------------------------------------------
    def initialise(self) -> None:
        # verl, ray (and the worker module, which subclasses verl's worker) exist only in PT-VERL-CUDA
        import ray
        from omegaconf import OmegaConf
        from verl.checkpoint_engine import CheckpointEngineManager
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup, ResourcePoolManager
        from verl.single_controller.ray.base import create_colocated_worker_cls
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
        from verl.trainer.ppo.utils import Role
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.rollout.llm_server import LLMServerManager
        from verl.workers.utils.losses import sft_loss

        from tools.experiments.verl_closure.backends.verl_worker import ClosureActorRolloutWorker

        cfg = compose_verl_config(self.overrides, self.config.verl_root)
        OmegaConf.resolve(cfg)
        self.cfg = cfg
        if not ray.is_initialized():
            runtime_env = get_ppo_ray_runtime_env(cfg)
            env_vars = runtime_env.setdefault("env_vars", {})
            root = str(resolve_project_root())
            env_vars["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
            ray.init(runtime_env=runtime_env)
        role = Role.ActorRollout
        pools = ResourcePoolManager(resource_pool_spec={"global_pool": [cfg.trainer.n_gpus_per_node] * cfg.trainer.nnodes},
                                    mapping={role: "global_pool"})
        pools.create_resource_pool()
        pool = pools.get_resource_pool(role)
        class_dict = {str(role): RayClassWithInitArgs(cls=ray.remote(ClosureActorRolloutWorker),
                                                      config=cfg.actor_rollout_ref, role=str(role))}
        group_of_workers = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(class_dict),
                                          device_name=cfg.trainer.device)
        self.wg = group_of_workers.spawn(prefix_set=class_dict.keys())[str(role)]
        self.wg.init_model()
        self.wg.set_loss_fn(partial(sft_loss, config=None))
        self.servers = LLMServerManager.create(config=cfg, worker_group=self.wg, rollout_resource_pool=pool)
        self.client = self.servers.get_client()
        self.checkpoints = CheckpointEngineManager(
            config=omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine),
            actor_wg=self.wg, replicas=self.servers.get_replicas())
        self.log(f"verl group {self.group}: worker group and {len(self.servers.get_replicas())} rollout replica(s) up; "
                 f"end-of-sequence ids {self.eos_ids}")

    def close(self) -> None:
        import ray  # PT-VERL-CUDA only, as in initialise

        if ray.is_initialized():
            ray.shutdown()

    # -- engine state ------------------------------------------------------
    def _sleep_level(self) -> int:
        model = self.cfg.actor_rollout_ref.model
        lora_as_adapter = (model.get("lora_rank", 0) > 0 or model.get("lora", {}).get("rank", 0) > 0) and not \
            model.get("lora", {}).get("merge", False)
        return 1 if lora_as_adapter else 2

    def release_engine(self) -> None:
        if not self.cfg.actor_rollout_ref.rollout.free_cache_engine:
            raise RuntimeError("release_engine called in a group with free_cache_engine=false")
        start = self.clock()
        self.checkpoints.sleep_replicas()
        self.events.append({"event": "engine_release", "call": "CheckpointEngineManager.sleep_replicas",
                            "tags": ["weights", "kv_cache"], "sleep_level": self._sleep_level(),
                            "start": start, "end": self.clock()})

    def weight_sync(self, version: int) -> None:
        start = self.clock()
        self.checkpoints.update_weights(global_steps=version)
        end = self.clock()
        resume_log = self.wg.closure_resume_log()[0]
        self.events.extend(resume_log[self._resume_seen:])
        self._resume_seen = len(resume_log)
        self.events.append({"event": "weight_sync", "call": "CheckpointEngineManager.update_weights",
                            "tags": None, "version": version, "start": start, "end": end,
                            "checkpoint_backend": self.cfg.actor_rollout_ref.rollout.checkpoint_engine.backend})
        self._engine_version = int(version)

    # -- rollouts ----------------------------------------------------------
    def generate(self, requests) -> list[dict]:
        outputs = asyncio.run(self._generate_all(requests))
        samples = []
        for request, output in zip(requests, outputs, strict=True):
            tokens = [int(t) for t in output.token_ids]
            if output.log_probs is None or len(output.log_probs) != len(tokens):
                raise RuntimeError(f"{request.rollout_id}: vLLM returned no per-token log-probs "
                                   f"(stop_reason {output.stop_reason})")
            reported = (output.extra_fields or {}).get("global_steps")
            samples.append({"response_token_ids": tokens, "behaviour_logprobs": [float(v) for v in output.log_probs],
                            "finish_reason": finish_reason(tokens, self.eos_ids, self.config.response_token_cap),
                            "response_text": self.tokenizer.decode(tokens), "seed": request.seed,
                            "engine_version": None if reported is None else int(reported)})
        return samples

    async def _generate_all(self, requests):
        async def one(request):
            params = {"temperature": self.config.temperature, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
                      "logprobs": True, "max_tokens": self.config.response_token_cap, "seed": request.seed}
            return await self.client.generate(request.rollout_id, prompt_ids=list(request.prompt_token_ids),
                                              sampling_params=params)

        return await asyncio.gather(*[one(r) for r in requests])

    # -- trainer -----------------------------------------------------------
    def trainer_logprobs(self, rollouts) -> list[list[float]]:
        """The actor's log-probs of each response token: left-padded prompts, right-padded responses,
        packed by verl's `left_right_2_no_padding` and unpacked by its `no_padding_2_padding`."""
        # verl's helpers need ray and tensordict: PT-VERL-CUDA only
        from verl.utils.tensordict_utils import assign_non_tensor, get_tensordict
        from verl.utils.tensordict_utils import get as tensordict_get
        from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

        pad = self.tokenizer.pad_id
        prompt_width = max(len(r["prompt_token_ids"]) for r in rollouts)
        response_width = max(len(r["response_token_ids"]) for r in rollouts)
        count = len(rollouts)
        prompts = torch.full((count, prompt_width), pad, dtype=torch.long)
        responses = torch.full((count, response_width), pad, dtype=torch.long)
        attention = torch.zeros((count, prompt_width + response_width), dtype=torch.long)
        response_mask = torch.zeros((count, response_width), dtype=torch.long)
        for row, rollout in enumerate(rollouts):
            prompt, response = rollout["prompt_token_ids"], rollout["response_token_ids"]
            prompts[row, prompt_width - len(prompt):] = torch.tensor(prompt)
            responses[row, :len(response)] = torch.tensor(response)
            attention[row, prompt_width - len(prompt):prompt_width + len(response)] = 1
            response_mask[row, :len(response)] = torch.tensor(rollout["action_mask"])
        position_ids = torch.clamp(torch.cumsum(attention, dim=-1) - 1, min=0)
        batch = get_tensordict(tensor_dict={"prompts": prompts, "responses": responses,
                                            "input_ids": torch.cat([prompts, responses], dim=1),
                                            "attention_mask": attention, "position_ids": position_ids,
                                            "response_mask": response_mask})
        batch = left_right_2_no_padding(batch)
        assign_non_tensor(batch, calculate_entropy=False, compute_loss=False, temperature=self.config.temperature)
        output = self.wg.compute_log_prob(batch)
        table = no_padding_2_padding(tensordict_get(output, "log_probs"), batch).float().cpu()
        return [table[row, :len(r["response_token_ids"])].tolist() for row, r in enumerate(rollouts)]

    def supervised_update(self, examples) -> dict:
        # verl's helpers need ray and tensordict: PT-VERL-CUDA only
        from verl.utils.dataset.dataset_utils import DatasetPadMode
        from verl.utils.tensordict_utils import get as tensordict_get
        from verl.utils.tensordict_utils import get_tensordict

        sequences = [list(e.prompt_token_ids) + list(e.target_token_ids) for e in examples]
        masks = [[0] * len(e.prompt_token_ids) + [1] * len(e.target_token_ids) for e in examples]

        def nested(rows):
            return torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.long) for r in rows], layout=torch.jagged)

        batch = get_tensordict(
            tensor_dict={"input_ids": nested(sequences), "position_ids": nested([list(range(len(s))) for s in sequences]),
                         "loss_mask": nested(masks)},
            non_tensor_dict={"pad_mode": DatasetPadMode.NO_PADDING, "temperature": 1.0, "compute_loss": True,
                             "calculate_entropy": False, "mini_batch_size": len(examples),
                             "global_batch_size": len(examples), "epochs": 1, "seed": self.config.sampling_seed,
                             "dataloader_kwargs": {"shuffle": False}})
        output = self.wg.update_actor(batch)
        metrics = tensordict_get(output, "metrics")
        self._trainer_version += 1

        def first(value):
            return value[0] if isinstance(value, list) and value else value

        return {"loss": first(metrics.get("loss")), "grad_norm": first(metrics.get("grad_norm")),
                "learning_rate": first(metrics.get("lr", self.config.learning_rate)),
                "target_tokens": sum(sum(m) for m in masks), "examples": len(examples),
                "loss_fn": "verl.workers.utils.losses.sft_loss (token-mean NLL of the answer tokens)"}

    def lora_state(self) -> dict:
        return self.wg.closure_lora_state()[0]

    def trainer_version(self) -> int:
        return self._trainer_version

    def engine_version(self) -> int | None:
        return self._engine_version


# ---------------------------------------------------------------------------
# Child entry point
# ---------------------------------------------------------------------------

def tensors_path_for(result_path: Path) -> Path:
    return Path(result_path).with_suffix(".lora.npz")


def read_child_result(result_path: Path) -> dict:
    """A group's result as the child wrote it, with its LoRA tensors loaded back."""
    result = json.loads(Path(result_path).read_text(encoding="utf-8"))
    result["lora_tensors"] = load_lora_tensors(tensors_path_for(result_path))
    return result


def run_child(spec_path: Path, result_path: Path, *, log: Callable[[str], None]) -> dict:
    """Run the group described by `spec_path` with a VerlGroupSession; write its result (JSON) and
    its LoRA tensors (.npz beside it) and return the result as written."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    config = ClosureConfig.from_public(spec["config"])

    def request(data: Mapping[str, Any]) -> Request:
        return Request(**{**data, "prompt_token_ids": tuple(data["prompt_token_ids"])})

    def example(data: Mapping[str, Any]) -> SupervisedExample:
        return SupervisedExample(task_id=data["task_id"], prompt_token_ids=tuple(data["prompt_token_ids"]),
                                 target_token_ids=tuple(data["target_token_ids"]))

    tasks = {task.task_id: task for task in build_task_pool(config.task_seed).tasks}
    session = VerlGroupSession(spec["group"], config, Path(spec["model_path"]), spec["overrides"], time.monotonic, log)
    try:
        result = run_group(session, group=spec["group"], requests=[request(r) for r in spec["requests"]],
                           probe_requests=[request(r) for r in spec["probe_requests"]],
                           examples=[example(e) for e in spec["examples"]], tasks=tasks, frozen=spec["frozen"],
                           drift_threshold=config.behaviour_drift_threshold, clock=time.monotonic, log=log)
    finally:
        session.close()
    save_lora_tensors(tensors_path_for(result_path), result.pop("lora_tensors"))
    Path(result_path).write_text(json.dumps(result, allow_nan=False), encoding="utf-8")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """The group process: its stdout is the group's log (the parent tees it into `<label>_<group>.log`)."""
    parser = argparse.ArgumentParser(prog=f"python -m {CHILD_MODULE}",
                                     description="Run one group of the shared experiment on verl (internal).")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    run_child(args.spec, args.result, log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
