"""The first optimiser step of an adapter, read from the adapted layers (chapter 31's rank sweep)."""

from __future__ import annotations

import pytest
import torch

from tools.chapters.lora_common import tiny_model, with_adapter
from tools.chapters.lora_variants import demo_batch
from tools.errors import ConfigError
from tools.experiments.sft_training.first_update import adapted_layers, effective_weight_change, first_step


@pytest.mark.parametrize("method", ["lora", "rslora", "dora"])
def test_the_weight_change_is_read_from_the_layer_and_starts_at_zero(method):
    model = with_adapter(tiny_model(seed=0), ("q_proj", "v_proj"), 4, method)
    layers = adapted_layers(model)
    assert [name.rsplit(".", 1)[-1] for name, _ in layers] == ["q_proj", "v_proj"] * 2
    _, layer = layers[0]
    assert float(effective_weight_change(layer).abs().max()) < 1e-6  # B = 0: the adapted layer is the base
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    change = effective_weight_change(layer)
    if method != "dora":
        assert torch.allclose(change, layer.get_delta_weight("default"), atol=1e-6)  # scaling * B @ A
    else:  # DoRA: magnitude times the row-normalised adapted weight, minus W0
        base = layer.get_base_layer().weight
        adapted = base + layer.get_delta_weight("default")
        magnitude = layer.lora_magnitude_vector["default"].weight
        expected = adapted * (magnitude / adapted.norm(dim=1)).unsqueeze(1) - base
        assert torch.allclose(change, expected, atol=1e-5)


def test_adams_first_step_ignores_the_scaling_and_sgds_does_not():
    """The same A, batch and learning rate: rsLoRA's scaling is 4 times LoRA's at rank 16; Adam's step on
    B is the same for both, so the weight change is 4 times larger; SGD's step on B carries the scaling
    too, so it is 16 times larger."""
    base, batch = tiny_model(seed=0), demo_batch(512, seed=3)
    sizes = {(method, optimizer): first_step(with_adapter(base, ("q_proj", "v_proj"), 16, method), [batch],
                                             optimizer=optimizer, learning_rate=rate)
             for method in ("lora", "rslora") for optimizer, rate in (("adamw", 1e-3), ("sgd", 0.1))}
    adam = sizes[("rslora", "adamw")]["delta_weight_norm"] / sizes[("lora", "adamw")]["delta_weight_norm"]
    sgd = sizes[("rslora", "sgd")]["delta_weight_norm"] / sizes[("lora", "sgd")]["delta_weight_norm"]
    assert adam == pytest.approx(4.0, rel=0.01) and sgd == pytest.approx(16.0, rel=0.01)
    assert all(item["loss_drop"] > 0 and item["layers"] == 4 for item in sizes.values())
    for bad in ({"optimizer": "lion", "learning_rate": 1e-3}, {"optimizer": "sgd", "learning_rate": 0}):
        with pytest.raises(ConfigError):
            first_step(with_adapter(base, ("q_proj",), 1, "lora"), [batch], **bad)
