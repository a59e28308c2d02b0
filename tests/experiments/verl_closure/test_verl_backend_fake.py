"""The verl backend on CPU, with a fake verl: no GPU, no vLLM, no Ray.

Stand-ins for Ray, the worker group (verl's `ActorRolloutRefWorker`, subclassed by our real
`ClosureActorRolloutWorker`), the vLLM server manager and its client, and the checkpoint-engine
manager are injected as modules; the real `VerlGroupSession` and the real group protocol then run
both groups end to end through the group process's own entry (`run_child`: spec file in, result and
LoRA tensors out), and the record is built and judged as a real run's would be.

The fake policy is a Markov model over the tokenizer's ids (log-probs of the next token given the last
one, moved by the LoRA B tensor). The fake engine samples from it with verl's vocab-size mask (every
logit at or above `len(tokenizer)` is -inf); the fake actor scores packed sequences position by
position. The actor's log-probs are unpacked by verl's own padding helpers where they import (they need
ray and tensordict), else by a stand-in that follows verl 0.9.1's `left_right_2_no_padding` /
`no_padding_2_padding`; either way a prompt/response misalignment shows as a same-version error.
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tools.data.arithmetic import build_task_pool
from tools.experiments.verl_closure import overrides as overrides_module
from tools.experiments.verl_closure.backends import GroupRun, PreparedModel, common, verl_backend
from tools.experiments.verl_closure.comparisons import compare_lora_updates
from tools.experiments.verl_closure.config import ClosureConfig
from tools.experiments.verl_closure.protocol import GROUPS, Request, build_examples, build_requests
from tools.experiments.verl_closure.record import build_record
from tools.measure.sampler import ResourceSampler
from tools.models.architectures import TINY_FOLDER
from tools.models.loading import model_identity

HYDRA_MISSING = [name for name in ("hydra", "omegaconf") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(HYDRA_MISSING) or importlib.util.find_spec("verl") is None,
                                reason="the verl session composes verl's Hydra config: pip install --no-deps -r "
                                       "environment/verl-config-check.txt")

WORKER_MODULE = "tools.experiments.verl_closure.backends.verl_worker"
RESPONSE_CAP = 6
LEARNING_RATE = 1e-3


# ---------------------------------------------------------------------------
# verl's padding helpers, or a stand-in with their contract
# ---------------------------------------------------------------------------

def real_padding_helpers():
    """verl's tensordict_utils and padding modules when they import (PT-VERL-CUDA), else None."""
    try:
        return (importlib.import_module("verl.utils.tensordict_utils"),
                importlib.import_module("verl.workers.utils.padding"))
    except ImportError:
        return None


class StandInTensorDict(dict):
    """Tensors by key plus non-tensor data, as verl's TensorDict carries them."""

    def __init__(self, tensors=None, non_tensor=None):
        super().__init__(tensors or {})
        self.non_tensor = dict(non_tensor or {})


def stand_in_tensordict_utils() -> types.ModuleType:
    module = types.ModuleType("verl.utils.tensordict_utils")
    module.get_tensordict = lambda tensor_dict, non_tensor_dict=None: StandInTensorDict(tensor_dict, non_tensor_dict)
    module.assign_non_tensor = lambda data, **values: data.non_tensor.update(values)
    module.assign_non_tensor_data = lambda data, key, value: data.non_tensor.__setitem__(key, value)
    module.get_non_tensor_data = lambda data, key, default=None: data.non_tensor.get(key, default)
    module.get = lambda data, key, default=None: data[key] if key in data else data.non_tensor.get(key, default)
    return module


def stand_in_padding() -> types.ModuleType:
    """verl 0.9.1's left-right padding <-> packed conversion (verl/workers/utils/padding.py), for
    inputs without nested prompts: packing keeps the attended tokens of each row; unpacking takes, for
    each row, the outputs at packed positions [end - response_len - 1, end - 1) (left shift by one: the
    output at a position belongs to the next token) and right-pads them to the response width."""
    module = types.ModuleType("verl.workers.utils.padding")

    def left_right_2_no_padding(data):
        input_ids = data.pop("input_ids")
        attention = data["attention_mask"].bool()
        data.non_tensor.update(max_seq_len=input_ids.shape[1], max_response_len=data["response_mask"].shape[1])
        data["input_ids"] = torch.nested.as_nested_tensor([row[mask] for row, mask in zip(input_ids, attention)],
                                                          layout=torch.jagged)
        data["position_ids"] = torch.nested.as_nested_tensor(
            [row[mask] for row, mask in zip(data["position_ids"], attention)], layout=torch.jagged)
        data["loss_mask"] = data["response_mask"]
        return data

    def no_padding_2_padding(tensor, data):
        values = tensor.values() if tensor.is_nested else tensor
        prompt_width = data["prompts"].shape[1]
        prompt_lens = data["attention_mask"][:, :prompt_width].sum(dim=1)
        response_lens = data["attention_mask"][:, prompt_width:].sum(dim=1)
        width = data["responses"].shape[1]
        ends = (prompt_lens + response_lens).cumsum(dim=0)
        assert int(ends[-1]) == values.shape[0]
        return torch.stack([F.pad(values[end - length - 1:end - 1], (0, width - int(length)))
                            for length, end in zip(response_lens, ends)])

    module.left_right_2_no_padding = left_right_2_no_padding
    module.no_padding_2_padding = no_padding_2_padding
    return module


# ---------------------------------------------------------------------------
# A fake policy, engine, worker, worker group, server manager and checkpoint manager
# ---------------------------------------------------------------------------

class FakePolicy:
    """log p(next | last token) over `rows` ids, moved by w = sum of the LoRA B tensor."""

    def __init__(self, rows: int, tokenizer_length: int):
        self.rows = rows
        self.tokenizer_length = tokenizer_length

    def logits(self, last: int, w: float) -> np.ndarray:
        ids = np.arange(self.rows)
        return 2.0 * np.sin(0.37 * last + 0.11 * ids) + 2.0 * w * np.cos(0.5 * ids)

    def actor_logprobs(self, last: int, w: float) -> np.ndarray:
        logits = self.logits(last, w)
        return logits - np.logaddexp.reduce(logits)

    def engine_logprobs(self, last: int, w: float) -> np.ndarray:
        """vLLM under verl: every logit at or above len(tokenizer) is masked before the softmax."""
        logits = self.logits(last, w)
        logits[self.tokenizer_length:] = -np.inf
        return logits - np.logaddexp.reduce(logits[:self.tokenizer_length])


def lora_weight(state) -> float:
    return float(sum(array.sum() for name, array in state.items() if "lora_B" in name))


class FakeServer:
    """One vLLM replica: weights it serves, its sleep state, and the policy version it reports."""

    def __init__(self, policy: FakePolicy, eos_ids):
        self.policy, self.eos_ids = policy, set(eos_ids)
        self.weight = None
        self.sleeping = False
        self.global_steps = None
        self.sleep_calls = 0

    async def generate(self, prompt_ids, sampling_params):
        if self.sleeping or self.weight is None:
            raise RuntimeError("generate on a sleeping or never-synced engine")
        rng = np.random.default_rng(sampling_params["seed"])
        tokens, logprobs, last = [], [], prompt_ids[-1]
        for _ in range(sampling_params["max_tokens"]):
            table = self.policy.engine_logprobs(last, self.weight)
            token = int(rng.choice(len(table), p=np.exp(table)))
            tokens.append(token)
            logprobs.append(float(table[token]))
            last = token
            if token in self.eos_ids:
                break
        return types.SimpleNamespace(token_ids=tokens, log_probs=logprobs, stop_reason="completed",
                                     extra_fields={"global_steps": self.global_steps})


class FakeRolloutAdapter:
    """verl's ServerAdapter: `resume(tags)` wakes the replica's weights or KV cache."""

    def __init__(self, server: FakeServer):
        self.server = server
        self.resumed: list[list[str]] = []

    async def resume(self, tags):
        self.resumed.append(list(tags))
        if "kv_cache" in tags:
            self.server.sleeping = False


def fake_engine_workers(policy: FakePolicy, server: FakeServer, tu) -> types.ModuleType:
    """`verl.workers.engine_workers` with an ActorRolloutRefWorker that trains and scores the fake policy."""
    module = types.ModuleType("verl.workers.engine_workers")

    class ActorRolloutRefWorker:
        def __init__(self, config, role):
            self.config, self.role = config, role

        def init_model(self):
            rng = np.random.default_rng(0)
            self.lora = {f"model.layers.{layer}.self_attn.{proj}.lora_{kind}.weight":
                         (rng.normal(size=(4, 8)).astype(np.float32) if kind == "A" else np.zeros((8, 4), np.float32))
                         for layer in range(2) for proj in ("q_proj", "v_proj") for kind in ("A", "B")}
            params = lambda: [(f"base_model.model.{name.replace('.weight', '.default.weight')}", torch.tensor(array))
                              for name, array in self.lora.items()]
            self.actor = types.SimpleNamespace(engine=types.SimpleNamespace(
                get_per_tensor_param=lambda layered_summon, base_sync_done: (params(), {"r": 4})))
            self.rollout = FakeRolloutAdapter(server)

        def set_loss_fn(self, loss_fn):
            self.loss_fn = loss_fn

        async def update_weights(self, global_steps=None, mode="auto"):
            if self.config.rollout.free_cache_engine and server.sleeping:
                await self.rollout.resume(tags=["weights"])
                server.weight = lora_weight(self.lora)
                await self.rollout.resume(tags=["kv_cache"])
            else:
                server.weight = lora_weight(self.lora)
            server.global_steps = global_steps

        def compute_log_prob(self, batch):
            ids = batch["input_ids"]
            values, offsets = ids.values().tolist(), ids.offsets().tolist()
            weight = lora_weight(self.lora)
            out = []
            for start, end in zip(offsets, offsets[1:]):
                for position in range(start, end):
                    following = values[position + 1] if position + 1 < end else None
                    out.append(0.0 if following is None else
                               float(policy.actor_logprobs(values[position], weight)[following]))
            return tu.get_tensordict(tensor_dict={"log_probs": torch.tensor(out, dtype=torch.float32)})

        def update_actor(self, batch):
            ids, mask = batch["input_ids"], batch["loss_mask"]
            weight, losses = lora_weight(self.lora), []
            for row, row_mask in zip(ids.unbind(), mask.unbind()):
                tokens, targets = row.tolist(), row_mask.tolist()
                losses += [-policy.actor_logprobs(tokens[t - 1], weight)[tokens[t]]
                           for t in range(1, len(tokens)) if targets[t]]
            for name in self.lora:  # AdamW's first step: about +-lr on every element with a gradient
                if "lora_B" in name:
                    self.lora[name] = self.lora[name] + LEARNING_RATE
            return tu.get_tensordict(tensor_dict={}, non_tensor_dict={
                "metrics": {"loss": [float(np.mean(losses))], "grad_norm": [1.0], "lr": [LEARNING_RATE]}})

    module.ActorRolloutRefWorker = ActorRolloutRefWorker
    return module


class FakeWorkerGroup:
    """What `RayWorkerGroup.spawn` returns for the actor/rollout role: calls go to the one worker."""

    def __init__(self, worker):
        self.worker = worker

    def init_model(self):
        self.worker.init_model()

    def set_loss_fn(self, loss_fn):
        self.worker.set_loss_fn(loss_fn)

    def compute_log_prob(self, batch):
        return self.worker.compute_log_prob(batch)

    def update_actor(self, batch):
        return self.worker.update_actor(batch)

    def closure_lora_state(self):
        return [self.worker.closure_lora_state()]

    def closure_resume_log(self):
        return [self.worker.closure_resume_log()]


def fake_modules(policy: FakePolicy, server: FakeServer, helpers) -> dict[str, types.ModuleType]:
    tu, padding = helpers
    modules = {name: types.ModuleType(name) for name in (
        "ray", "verl.checkpoint_engine", "verl.single_controller.ray", "verl.single_controller.ray.base",
        "verl.trainer.constants_ppo", "verl.trainer.ppo.utils", "verl.utils.config", "verl.workers.rollout.llm_server",
        "verl.workers.utils.losses", "verl.utils.dataset.dataset_utils", "verl.single_controller.base.decorator")}
    ray = modules["ray"]
    ray.state = {"initialized": False}
    ray.is_initialized = lambda: ray.state["initialized"]
    ray.init = lambda runtime_env: ray.state.update(initialized=True, runtime_env=runtime_env)
    ray.shutdown = lambda: ray.state.update(initialized=False)
    ray.remote = lambda cls: cls

    class Role(enum.Enum):
        ActorRollout = "actor_rollout"

    modules["verl.trainer.ppo.utils"].Role = Role
    modules["verl.trainer.constants_ppo"].get_ppo_ray_runtime_env = lambda cfg: {"env_vars": {}}
    modules["verl.utils.config"].omega_conf_to_dataclass = lambda node: node
    modules["verl.workers.utils.losses"].sft_loss = lambda *args, **kwargs: None
    modules["verl.utils.dataset.dataset_utils"].DatasetPadMode = enum.Enum("DatasetPadMode", "NO_PADDING")
    decorator = modules["verl.single_controller.base.decorator"]
    decorator.Dispatch = enum.Enum("Dispatch", "ONE_TO_ALL")
    decorator.register = lambda **kwargs: (lambda function: function)

    class RayClassWithInitArgs:
        def __init__(self, cls, **kwargs):
            self.cls, self.kwargs = cls, kwargs

    class ResourcePoolManager:
        def __init__(self, resource_pool_spec, mapping):
            self.spec, self.mapping = resource_pool_spec, mapping

        def create_resource_pool(self):
            assert self.spec == {"global_pool": [1]}, "one GPU on one node"

        def get_resource_pool(self, role):
            return self.mapping[role]

    class RayWorkerGroup:
        def __init__(self, resource_pool, ray_cls_with_init, device_name):
            self.classes, self.device_name = ray_cls_with_init, device_name

        def spawn(self, prefix_set):
            return {role: FakeWorkerGroup(self.classes[role].cls(**self.classes[role].kwargs)) for role in prefix_set}

    ray_module = modules["verl.single_controller.ray"]
    ray_module.RayClassWithInitArgs, ray_module.ResourcePoolManager = RayClassWithInitArgs, ResourcePoolManager
    ray_module.RayWorkerGroup = RayWorkerGroup
    modules["verl.single_controller.ray.base"].create_colocated_worker_cls = lambda class_dict: class_dict

    class FakeClient:
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return await server.generate(prompt_ids, sampling_params)

    class LLMServerManager:
        @classmethod
        def create(cls, config, worker_group, rollout_resource_pool):
            manager = cls()
            manager.free_cache_engine = config.actor_rollout_ref.rollout.free_cache_engine
            return manager

        def get_client(self):
            return FakeClient()

        def get_replicas(self):
            return [server]

    modules["verl.workers.rollout.llm_server"].LLMServerManager = LLMServerManager

    class CheckpointEngineManager:
        def __init__(self, config, actor_wg, replicas):
            assert config.backend == "naive"
            self.actor_wg, self.replicas = actor_wg, replicas

        def sleep_replicas(self):
            for replica in self.replicas:
                replica.sleep_calls += 1
                replica.sleeping = True

        def update_weights(self, global_steps=None):
            asyncio.run(self.actor_wg.worker.update_weights(global_steps=global_steps, mode="naive"))

    modules["verl.checkpoint_engine"].CheckpointEngineManager = CheckpointEngineManager
    modules["verl.utils.tensordict_utils"] = tu
    modules["verl.workers.utils.padding"] = padding
    modules["verl.workers.engine_workers"] = fake_engine_workers(policy, server, tu)
    return modules


# ---------------------------------------------------------------------------
# Running both groups through the group process's entry
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def closure_model(tiny_model_dir):
    """The tiny model's folder and the experiment's own tokenizer wrapper of it."""
    return tiny_model_dir, common.load_tokenizer(tiny_model_dir)


def run_with_fake_verl(monkeypatch, tmp_path, closure_model, *, rows: int | None = None):
    """Both groups on the fake verl; returns (config, groups, record, servers, logs)."""
    path, tokenizer = closure_model
    length = len(tokenizer.tokenizer)
    helpers = real_padding_helpers() or (stand_in_tensordict_utils(), stand_in_padding())
    config = ClosureConfig(run_label="fake_verl_closure", output=tmp_path / "fake_verl_closure.json", backend="verl",
                           model="tiny", device="cuda", response_token_cap=RESPONSE_CAP, learning_rate=LEARNING_RATE)
    pool = build_task_pool(config.task_seed)
    tasks = {task.task_id: task for task in pool.tasks}
    model = PreparedModel(path=path, identity=model_identity(path), tokenizer=tokenizer, adapters={g: None for g in GROUPS})
    requests = build_requests(pool, tokenizer.prompt_ids, config.samples_per_task, config.sampling_seed)
    probes = build_requests(pool, tokenizer.prompt_ids, 1, config.sampling_seed + 10_000, tag="probe")
    examples = build_examples(pool, tokenizer.prompt_ids, tokenizer.answer_ids)
    overrides = {g: overrides_module.overrides_for_config(config, g, path, None) for g in GROUPS}
    groups, servers, logs, frozen = {}, {}, [], None
    for group in GROUPS:
        policy = FakePolicy(rows or length, length)
        servers[group] = FakeServer(policy, common.eos_token_ids(path, tokenizer))
        for name, module in fake_modules(policy, servers[group], helpers).items():
            monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.delitem(sys.modules, WORKER_MODULE, raising=False)  # re-import it on this group's fake base
        run = GroupRun(group=group, config=config, model=model, overrides=overrides[group], requests=requests,
                       probe_requests=probes, examples=examples, tasks=tasks, frozen=frozen, clock=time.monotonic,
                       log=logs.append, workspace=tmp_path)
        spec_path, result_path = tmp_path / f"spec_{group}.json", tmp_path / f"result_{group}.json"
        spec_path.write_text(json.dumps(verl_backend.group_spec(run)), encoding="utf-8")
        verl_backend.run_child(spec_path, result_path, log=logs.append)
        groups[group] = verl_backend.read_child_result(result_path)
        assert sys.modules["ray"].is_initialized() is False, "the session shuts Ray down"
        if group == "release":
            frozen = groups[group]["frozen_rollouts"]
    sys.modules.pop(WORKER_MODULE, None)
    tensors = {group: groups[group].pop("lora_tensors") for group in GROUPS}
    sampler = ResourceSampler(lambda: (None, 1.0), interval_s=3600.0, description={"gpu_source": "fake"})
    sampler.sample_once()
    record = build_record(
        config=config, pool=pool, groups=groups, settings={g: {"free_cache_engine": g == "release"} for g in GROUPS},
        overrides=overrides, sampler=sampler, origin=min(g["phases"][0]["start"] for g in groups.values()),
        model=model.identity, runtime={}, backend_details={}, memory_settling={"before_group": {}},
        update_comparison=compare_lora_updates(tensors["release"], tensors["retain"]))
    return config, groups, record, servers, logs


def test_both_groups_run_end_to_end_on_the_fake_verl(monkeypatch, tmp_path, closure_model):
    config, groups, record, servers, logs = run_with_fake_verl(monkeypatch, tmp_path, closure_model)
    decision = record["system_decision"]
    assert decision["failed_checks"] == [] and decision["status"] == "pass"
    release, retain = groups["release"], groups["retain"]
    # log-probs line up through verl's packing: the actor re-scores the engine's tokens to float precision
    for group in groups.values():
        assert group["same_version_before_update"]["max_abs_error"] < 1e-5
        assert group["same_version_after_sync"]["max_abs_error"] < 1e-5
        assert group["engine_reported_versions"] == {"generation": [0], "post_sync_generation": [1]}
        assert group["changed_tensor_count"] == 4 and all("lora_B" in n for n in group["changed_tensors"])
    assert record["updated_lora_comparison"]["bit_identical"] is True
    # release and resume only in the release group, resume tags in verl's order
    assert servers["release"].sleep_calls == 2 and servers["retain"].sleep_calls == 0
    resumes = [e["tags"] for e in release["worker_events"] if e["event"] == "engine_resume"]
    assert resumes == [["weights"], ["kv_cache"], ["weights"], ["kv_cache"]]
    assert retain["resume_calls"] == retain["release_calls"] == 0
    assert [e["event"] for e in retain["worker_events"]] == ["weight_sync", "weight_sync"]
    # frozen rollouts are the release group's, re-scored by both; finish reasons from the token count
    assert record["frozen_rollouts"]["count"] == 32 and retain["frozen_sha256"] == release["frozen_sha256"]
    for rollout in record["frozen_rollouts"]["rollouts"]:
        tokens = rollout["response_token_ids"]
        assert rollout["finish_reason"] == ("stop" if tokens[-1] in (0, 2) else "length")
        assert rollout["engine_reported_version"] == 0
    assert any("rollout replica(s) up" in line for line in logs)
    # the record names the model folder, never the machine path the groups were given
    shown = [item.split("=", 1) for items in record["verl_overrides"].values() for item in items]
    assert dict(shown)["actor_rollout_ref.model.path"] == TINY_FOLDER and not any(
        value.startswith("/") for _, value in shown)


def test_a_vocabulary_mismatch_fails_both_same_version_checks(monkeypatch, tmp_path, closure_model):
    """The tiny model's 448 rows against its 385-token tokenizer: vLLM masks rows 385.., the actor does not."""
    path, tokenizer = closure_model
    rows = json.loads((path / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    assert rows > len(tokenizer.tokenizer)
    _, groups, record, _, _ = run_with_fake_verl(monkeypatch, tmp_path, closure_model, rows=rows)
    failed = record["system_decision"]["failed_checks"]
    assert {"same_version_before_update_within_limits", "same_version_after_sync_within_limits"} <= set(failed)
    assert groups["release"]["same_version_before_update"]["mean_abs_error"] > 0.05
    with pytest.raises(Exception, match="masks logits"):
        verl_backend.BACKEND.prepare(ClosureConfig(run_label="fake_verl_vocab", output=tmp_path / "v.json",
                                                   backend="verl", model="tiny", device="cuda",
                                                   model_cache=path.parent), tmp_path / "w")


class ScriptedClient:
    """Returns preset outputs in request order."""

    def __init__(self, outputs):
        self.outputs = list(outputs)

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        return self.outputs.pop(0)


def test_finish_reason_uses_every_eos_id_and_the_token_count(closure_model):
    path, tokenizer = closure_model
    config = ClosureConfig(run_label="fake_verl_finish", output=Path("x.json"), backend="verl", model="tiny",
                           response_token_cap=4)
    session = verl_backend.VerlGroupSession("release", config, path, [], time.monotonic, lambda line: None)
    assert tokenizer.eos_id == 2 and session.eos_ids == [0, 2]  # generation_config.json adds <|endoftext|>

    def output(tokens, steps):
        return types.SimpleNamespace(token_ids=tokens, log_probs=[-1.0] * len(tokens), stop_reason="completed",
                                     extra_fields={"global_steps": steps})

    session.client = ScriptedClient([output([7, 0], 3), output([7, 2], 3), output([7, 8, 9, 10], 3),
                                     output([7, 8], None)])
    requests = [Request(f"t#s{i}", "t", i, i, (1, 2), "p", "t") for i in range(4)]
    samples = session.generate(requests)
    assert [s["finish_reason"] for s in samples] == ["stop", "stop", "length", "unknown"]
    assert [s["engine_version"] for s in samples] == [3, 3, 3, None]


def test_the_worker_records_each_resume_and_hands_out_its_lora_tensors(monkeypatch, closure_model):
    path, tokenizer = closure_model
    policy = FakePolicy(len(tokenizer.tokenizer), len(tokenizer.tokenizer))
    server = FakeServer(policy, [2])
    for name, module in fake_modules(policy, server, (stand_in_tensordict_utils(), stand_in_padding())).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, WORKER_MODULE, raising=False)
    try:
        worker_module = importlib.import_module(WORKER_MODULE)
        config = types.SimpleNamespace(rollout=types.SimpleNamespace(free_cache_engine=True))
        worker = worker_module.ClosureActorRolloutWorker(config, "actor_rollout")
        worker.init_model()
        state = worker.closure_lora_state()
        assert sorted(state) == sorted(worker.lora) and all(isinstance(a, np.ndarray) for a in state.values())
        server.sleeping = True
        asyncio.run(worker.update_weights(global_steps=1))
        log = worker.closure_resume_log()
        assert [entry["tags"] for entry in log] == [["weights"], ["kv_cache"]]
        assert all(entry["global_steps"] == 1 and entry["end"] >= entry["start"] for entry in log)
        assert "resume" not in worker.rollout.__dict__  # the recording wrapper is removed again
    finally:
        sys.modules.pop(WORKER_MODULE, None)


def test_the_parent_runs_each_group_as_a_child_process_and_reports_its_failure(tmp_path, monkeypatch, closure_model):
    path, tokenizer = closure_model
    config = ClosureConfig(run_label="fake_verl_parent", output=tmp_path / "p.json", backend="verl", model="tiny")
    model = PreparedModel(path=path, identity={}, tokenizer=tokenizer, adapters={"release": None})
    run = GroupRun(group="release", config=config, model=model, overrides=[], requests=[], probe_requests=[],
                   examples=[], tasks={}, frozen=None, clock=time.monotonic, log=[].append, workspace=tmp_path)
    monkeypatch.setattr(verl_backend, "child_command",
                        lambda spec, result: [sys.executable, "-c", "import sys; print('child ran'); sys.exit(3)"])
    lines = []
    with pytest.raises(RuntimeError, match="exit code 3"):
        verl_backend.BACKEND.execute_group(GroupRun(**{**run.__dict__, "log": lines.append}))
    assert "child ran" in lines and json.loads((tmp_path / "spec_release.json").read_text())["group"] == "release"
    with pytest.raises(ValueError, match="time.monotonic"):
        verl_backend.BACKEND.execute_group(GroupRun(**{**run.__dict__, "clock": lambda: 0.0}))
