"""The verl backend's override sets, validated against verl 0.9.1's shipped Hydra config.

Needs the packages of environment/verl-config-check.txt (verl installed without its heavy
dependencies, plus hydra-core); verl itself is never imported, only its YAML is composed.
"""

import importlib.util

import pytest

from tools import verl_mechanism_closure as vmc
from tools.errors import ConfigError
from tools.core.environment import installed_version

REQUIRED = {"hydra": "hydra-core", "omegaconf": "omegaconf", "verl": "verl"}
MISSING = sorted(dist for module, dist in REQUIRED.items() if importlib.util.find_spec(module) is None)
INSTALL = "pip install --no-deps -r environment/verl-config-check.txt"

pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"verl config check needs {', '.join(MISSING)} "
                                                       f"(install with: {INSTALL})")

MODEL = "/models/Qwen2.5-0.5B-Instruct"
ADAPTER = "/runs/initial lora/seed0"
FREE_CACHE_KEY = "actor_rollout_ref.rollout.free_cache_engine"


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        flat = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _compose(group, **kwargs):
    from omegaconf import OmegaConf

    config = vmc.compose_verl_config(vmc.verl_group_overrides(group, MODEL, lora_adapter_path=ADAPTER, **kwargs))
    return config, _flatten(OmegaConf.to_container(config, resolve=True))


def test_the_installed_verl_is_the_pinned_version():
    assert installed_version("verl") == vmc.VERL_VERSION, f"reinstall with: {INSTALL}"


@pytest.mark.parametrize("group", vmc.GROUPS)
def test_each_group_composes_with_the_expected_values(group):
    config, _ = _compose(group)
    rollout, model = config.actor_rollout_ref.rollout, config.actor_rollout_ref.model
    assert rollout.free_cache_engine is vmc.FREE_CACHE_ENGINE[group]
    assert rollout.enable_sleep_mode is True
    assert rollout.mode == "async" and rollout.name == "vllm"
    assert rollout.tensor_model_parallel_size == 1
    assert config.trainer.n_gpus_per_node == 1 and config.trainer.nnodes == 1
    assert rollout.calculate_log_probs is True and rollout.temperature == 1.0 and rollout.seed == 42
    assert rollout.response_length == 128 and rollout.prompt_length == 256
    assert model.path == MODEL and model.lora_adapter_path == ADAPTER
    assert model.lora_rank == 16 and list(model.target_modules) == ["q_proj", "v_proj"]
    assert config.actor_rollout_ref.actor.optim.total_training_steps == 1
    # no torch.compile / CUDA-graph capture: each group starts fresh processes
    assert rollout.enforce_eager is True
    assert config.actor_rollout_ref.actor.use_torch_compile is False
    assert config.actor_rollout_ref.actor.fsdp_config.use_torch_compile is False


@pytest.mark.parametrize("kwargs", [{}, {"attn_implementation": "sdpa", "response_token_cap": 64}])
def test_groups_differ_only_in_free_cache_engine(kwargs):
    _, release = _compose("release", **kwargs)
    _, retain = _compose("retain", **kwargs)
    differing = sorted(key for key in set(release) | set(retain) if release.get(key) != retain.get(key))
    assert differing == [FREE_CACHE_KEY]
    release_list = vmc.verl_group_overrides("release", MODEL, **kwargs)
    retain_list = vmc.verl_group_overrides("retain", MODEL, **kwargs)
    assert [a for a, b in zip(release_list, retain_list) if a != b] == [f"{FREE_CACHE_KEY}=true"]
    assert len(release_list) == len(retain_list)


def test_sdpa_variant_turns_off_packed_batches():
    config, _ = _compose("release", attn_implementation="sdpa")
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert config.actor_rollout_ref.model.use_remove_padding is False


def test_composition_rejects_a_key_verl_does_not_have():
    from hydra.errors import ConfigCompositionException

    overrides = vmc.verl_group_overrides("release", MODEL) + ["actor_rollout_ref.rollout.free_cache_engin=true"]
    with pytest.raises(ConfigCompositionException):
        vmc.compose_verl_config(overrides)


def test_enable_sleep_mode_is_not_in_the_yaml_so_it_needs_a_plus():
    from hydra.errors import ConfigCompositionException

    overrides = [item.lstrip("+") for item in vmc.verl_group_overrides("release", MODEL)]
    with pytest.raises(ConfigCompositionException):
        vmc.compose_verl_config(overrides)


def test_unknown_group_is_refused():
    with pytest.raises(ConfigError):
        vmc.verl_group_overrides("hybrid", MODEL)


def test_the_lists_a_default_run_uses_compose_and_pair(tmp_path):
    from omegaconf import OmegaConf

    config = vmc.ClosureConfig(run_label="verl_override_check", output=tmp_path / "r.json")
    flat = {}
    for group in vmc.GROUPS:
        composed = vmc.compose_verl_config(vmc.overrides_for_config(config, group, MODEL, ADAPTER))
        assert composed.actor_rollout_ref.model.override_config.attn_implementation == config.attn_implementation
        flat[group] = _flatten(OmegaConf.to_container(composed, resolve=True))
    differing = sorted(k for k in set(flat["release"]) | set(flat["retain"])
                       if flat["release"].get(k) != flat["retain"].get(k))
    assert differing == [FREE_CACHE_KEY]
