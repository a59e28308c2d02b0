"""The `verl` backend of the shared experiment: verl 0.9.1 on one GPU (PT-VERL-CUDA profile).

Each group runs in its own process (`python -m tools.closure_verl_backend --spec S --result R`),
so the two groups never share a Ray cluster or a vLLM engine; the parent process samples memory
and tees the group's output into `<label>_<group>.log`. Inside, the pieces are the ones verl's
`RayPPOTrainer.init_workers` builds, minus reward, critic and reference roles:

- the actor/rollout worker group (`ActorRolloutRefWorker`, here `ClosureActorRolloutWorker`),
  with `set_loss_fn(verl.workers.utils.losses.sft_loss)` for the supervised update;
- `LLMServerManager` (vLLM async servers in hybrid mode) and its token-in/token-out client,
  asked for log-probs (the behaviour log-probs of the rollouts);
- `CheckpointEngineManager`: `sleep_replicas` releases the engine, `update_weights` syncs the
  actor's weights into it (resuming weights and KV cache when `free_cache_engine` is set).

This module imports verl only inside functions, so the course environment can import it.
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
from typing import Any, Callable, Mapping, Sequence

from tools.closure_torch_backend import (adapter_sha256, cleanup_workspace, initial_adapter, load_tokenizer,
                                         model_identity_for, resolve_model_path)

__all__ = ["resolve_model_path", "model_identity_for", "load_tokenizer", "initial_adapter", "cleanup_workspace",
           "runtime_context", "details", "execute_group", "VerlGroupSession"]

ENGINE_DESCRIPTION = {
    "engine": "vLLM async server in hybrid mode (verl LLMServerManager), LoRA served as an adapter",
    "release": "CheckpointEngineManager.sleep_replicas -> vLLMHttpServer.sleep (level 1 with a LoRA adapter, "
               "else 2; a no-op when free_cache_engine is false, so it is only called in the release group)",
    "resume": "ServerAdapter.resume(tags) inside ActorRolloutRefWorker.update_weights (weights, then kv_cache), "
              "gated by free_cache_engine",
    "sampling": "one request per sample through LLMServerClient.generate, per-request seed, logprobs on",
    "trainer": "FSDP actor, ActorRolloutRefWorker.update_actor with sft_loss (one mini-batch, one epoch)",
}


def runtime_context(config):
    """Nothing to set in the parent process for verl."""
    return contextlib.nullcontext({})


def details(config, adapters: Mapping[str, Path]) -> dict:
    from tools.core.environment import installed_version

    return {**ENGINE_DESCRIPTION, "initial_adapter_sha256": {g: adapter_sha256(p) for g, p in adapters.items()},
            "versions": {name: installed_version(name) for name in ("verl", "vllm", "ray", "torch")}}


# ---------------------------------------------------------------------------
# Parent side: one process per group
# ---------------------------------------------------------------------------

def execute_group(*, group: str, config, model_path: Path, adapter: Path, overrides: Sequence[str], requests,
                  probe_requests, examples, tasks, frozen, clock: Callable[[], float], log: Callable[[str], None],
                  workspace: Path) -> dict:
    """Run one group in a child process and return its measurements.

    The child stamps events with time.monotonic, the machine-wide clock; `clock` must be that
    clock for the stage events to line up with the parent's resource samples.
    """
    if clock is not time.monotonic:
        raise ValueError("the verl backend needs clock=time.monotonic (events come from other processes)")
    from tools.core.paths import resolve_project_root

    spec = {
        "group": group,
        "config": config.public(),
        "model_path": str(model_path),
        "overrides": list(overrides),
        "requests": [dataclasses.asdict(r) for r in requests],
        "probe_requests": [dataclasses.asdict(r) for r in probe_requests],
        "examples": [dataclasses.asdict(e) for e in examples],
        "frozen": None if frozen is None else list(frozen),
    }
    spec_path = Path(workspace) / f"spec_{group}.json"
    result_path = Path(workspace) / f"result_{group}.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    root = resolve_project_root()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "tools.closure_verl_backend", "--spec", str(spec_path), "--result",
               str(result_path)]
    log("launching: " + " ".join(command))
    with subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          encoding="utf-8", errors="replace") as process:
        for line in process.stdout:
            log(line.rstrip("\n"))
        code = process.wait()
    if code != 0 or not result_path.is_file():
        raise RuntimeError(f"verl group {group} failed (exit code {code}); the traceback is in the group log")
    return json.loads(result_path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------
# Child side: the verl session
# ---------------------------------------------------------------------------

class VerlGroupSession:
    """GroupSession on verl 0.9.1: worker group, vLLM servers and checkpoint engine of one group."""

    def __init__(self, group: str, config, model_path: Path, overrides: Sequence[str], clock: Callable[[], float],
                 log: Callable[[str], None]):
        self.group = group
        self.config = config
        self.model_path = Path(model_path)
        self.overrides = list(overrides)
        self.clock = clock
        self.log = log
        self.events: list[dict] = []
        self.tokenizer = load_tokenizer(self.model_path)
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

        from tools.closure_verl_worker import ClosureActorRolloutWorker
        from tools.core.paths import resolve_project_root
        from tools.verl_mechanism_closure import compose_verl_config

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
        self.log(f"verl group {self.group}: worker group and {len(self.servers.get_replicas())} rollout replica(s) up")

    def close(self) -> None:
        import ray

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
        eos = {int(self.tokenizer.tokenizer.eos_token_id)}
        samples = []
        for request, output in zip(requests, outputs, strict=True):
            tokens = [int(t) for t in output.token_ids]
            if output.log_probs is None or len(output.log_probs) != len(tokens):
                raise RuntimeError(f"{request.rollout_id}: vLLM returned no per-token log-probs "
                                   f"(stop_reason {output.stop_reason})")
            finish = "stop" if tokens and tokens[-1] in eos else "length"
            samples.append({"response_token_ids": tokens, "behaviour_logprobs": [float(v) for v in output.log_probs],
                            "finish_reason": finish, "response_text": self.tokenizer.decode(tokens),
                            "seed": request.seed})
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
        import torch
        from verl.utils import tensordict_utils as tu
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
        batch = tu.get_tensordict(tensor_dict={"prompts": prompts, "responses": responses,
                                               "input_ids": torch.cat([prompts, responses], dim=1),
                                               "attention_mask": attention, "position_ids": position_ids,
                                               "response_mask": response_mask})
        batch = left_right_2_no_padding(batch)
        tu.assign_non_tensor(batch, calculate_entropy=False, compute_loss=False, temperature=self.config.temperature)
        output = self.wg.compute_log_prob(batch)
        table = no_padding_2_padding(tu.get(output, "log_probs"), batch).float().cpu()
        return [table[row, :len(r["response_token_ids"])].tolist() for row, r in enumerate(rollouts)]

    def supervised_update(self, examples) -> dict:
        import torch
        from verl.utils import tensordict_utils as tu
        from verl.utils.dataset.dataset_utils import DatasetPadMode

        sequences = [list(e.prompt_token_ids) + list(e.target_token_ids) for e in examples]
        masks = [[0] * len(e.prompt_token_ids) + [1] * len(e.target_token_ids) for e in examples]

        def nested(rows):
            return torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.long) for r in rows], layout=torch.jagged)

        batch = tu.get_tensordict(
            tensor_dict={"input_ids": nested(sequences), "position_ids": nested([list(range(len(s))) for s in sequences]),
                         "loss_mask": nested(masks)},
            non_tensor_dict={"pad_mode": DatasetPadMode.NO_PADDING, "temperature": 1.0, "compute_loss": True,
                             "calculate_entropy": False, "mini_batch_size": len(examples),
                             "global_batch_size": len(examples), "epochs": 1, "seed": self.config.sampling_seed,
                             "dataloader_kwargs": {"shuffle": False}})
        output = self.wg.update_actor(batch)
        metrics = tu.get(output, "metrics")
        self._trainer_version += 1

        def first(value):
            return value[0] if isinstance(value, list) and value else value

        return {"loss": first(metrics.get("loss")), "grad_norm": first(metrics.get("grad_norm")),
                "learning_rate": first(metrics.get("lr", self.config.learning_rate)),
                "target_tokens": sum(sum(m) for m in masks), "examples": len(examples),
                "loss_fn": "verl.workers.utils.losses.sft_loss (token-mean NLL of the answer tokens)"}

    def lora_digests(self) -> dict[str, dict]:
        return self.wg.closure_lora_digests()[0]

    def trainer_version(self) -> int:
        return self._trainer_version

    def engine_version(self) -> int | None:
        return self._engine_version


# ---------------------------------------------------------------------------
# Child entry point
# ---------------------------------------------------------------------------

def _child(spec_path: Path, result_path: Path) -> int:
    from tools.data.arithmetic import build_task_pool
    from tools.closure_protocol import Request, SupervisedExample, run_group
    from tools.verl_mechanism_closure import ClosureConfig

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    config = ClosureConfig.from_public(spec["config"])

    def request(data: Mapping[str, Any]) -> Request:
        return Request(**{**data, "prompt_token_ids": tuple(data["prompt_token_ids"])})

    def example(data: Mapping[str, Any]) -> SupervisedExample:
        return SupervisedExample(task_id=data["task_id"], prompt_token_ids=tuple(data["prompt_token_ids"]),
                                 target_token_ids=tuple(data["target_token_ids"]))

    def log(line: str) -> None:
        print(line, flush=True)

    tasks = {task.task_id: task for task in build_task_pool(config.task_seed).tasks}
    session = VerlGroupSession(spec["group"], config, Path(spec["model_path"]), spec["overrides"], time.monotonic, log)
    try:
        result = run_group(session, group=spec["group"], requests=[request(r) for r in spec["requests"]],
                           probe_requests=[request(r) for r in spec["probe_requests"]],
                           examples=[example(e) for e in spec["examples"]], tasks=tasks, frozen=spec["frozen"],
                           config=config, clock=time.monotonic, log=log)
    finally:
        session.close()
    Path(result_path).write_text(json.dumps(result, allow_nan=False), encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.closure_verl_backend",
                                     description="Run one group of the shared experiment on verl (internal).")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    return _child(args.spec, args.result)


if __name__ == "__main__":
    sys.exit(main())
