"""The shared tiny-model fixtures of `tests/conftest.py`: one model for the session, guarded against changes."""

from __future__ import annotations

import torch

from conftest import model_fingerprint


def test_the_fixtures_are_one_model_and_its_tokenizer(tiny_model_dir, tiny_model, tiny_tokenizer, fresh_tiny_model):
    assert (tiny_model_dir / "config.json").is_file() and not tiny_model.training
    assert tiny_model.config.eos_token_id == tiny_tokenizer.eos_token_id
    assert fresh_tiny_model is not tiny_model
    assert model_fingerprint(fresh_tiny_model) == model_fingerprint(tiny_model)


def test_reading_the_model_keeps_its_fingerprint_and_any_change_alters_it(fresh_tiny_model, tiny_tokenizer):
    model = fresh_tiny_model
    before = model_fingerprint(model)
    with torch.no_grad():
        model(**tiny_tokenizer("What is 2 + 3?", return_tensors="pt"))
    assert model_fingerprint(model) == before
    changes = [lambda: model.train(), lambda: setattr(model.config, "use_cache", not model.config.use_cache),
               lambda: setattr(model.generation_config, "top_k", 7),
               lambda: next(model.parameters()).requires_grad_(False),
               lambda: next(model.parameters()).data.view(-1)[0].add_(1.0)]
    seen = {before}
    for change in changes:
        change()
        seen.add(model_fingerprint(model))
    assert len(seen) == len(changes) + 1
