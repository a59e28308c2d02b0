"""The Ray worker of the verl backend (PT-VERL-CUDA only: this module imports verl at module level and
is imported only inside a group process, by `verl_backend.VerlGroupSession.initialise`).

`ClosureActorRolloutWorker` is verl 0.9.1's `ActorRolloutRefWorker` with two additions the experiment
needs as evidence: the actor's LoRA tensors (gathered to CPU, as numpy arrays), and a log of the
rollout engine's resume calls made inside `update_weights` (stamped with the machine-wide monotonic
clock, the same clock as the driver's stage events). Nothing else is changed: the sync still runs
verl's own `update_weights`, gated by `free_cache_engine` as in verl.
"""

from __future__ import annotations

import time

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker

from tools.experiments.verl_closure.backends.common import lora_arrays


class ClosureActorRolloutWorker(ActorRolloutRefWorker):
    """ActorRolloutRefWorker plus the LoRA tensors and a resume-call log."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def closure_lora_state(self) -> dict:
        """{normalised name: float32 array} of the actor's LoRA tensors (full, gathered to CPU)."""
        params, peft_config = self.actor.engine.get_per_tensor_param(layered_summon=False, base_sync_done=True)
        if peft_config is None:
            raise RuntimeError("the actor has no LoRA adapter (lora_rank 0 or merged LoRA); nothing to compare")
        return lora_arrays(params)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def closure_resume_log(self) -> list:
        """The resume calls recorded so far (each with tags and monotonic start/end)."""
        return list(getattr(self, "_closure_resume_log", []))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        """verl's update_weights, with every `rollout.resume` call it makes recorded."""
        log = self.__dict__.setdefault("_closure_resume_log", [])
        original = self.rollout.resume

        async def recorded_resume(tags):
            start = time.monotonic()
            result = await original(tags=tags)
            log.append({"event": "engine_resume", "call": "ServerAdapter.resume", "tags": list(tags),
                        "start": start, "end": time.monotonic(), "global_steps": global_steps})
            return result

        self.rollout.resume = recorded_resume
        try:
            return await super().update_weights(global_steps=global_steps, mode=mode)
        finally:
            del self.rollout.resume
