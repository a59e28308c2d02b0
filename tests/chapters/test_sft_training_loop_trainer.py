"""Chapter 15's claim about transformers' Trainer (issue 22): what it counts for `num_items_in_batch`."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tools.chapters.sft_training_loop import make_batch, shifted_num_items, trainer_num_items


def test_trainer_counts_labels_before_the_shift():
    """With SFT masking (the first position is a prompt token) both counts agree; when a row's first
    label is supervised, the Trainer counts one label per row that is never predicted."""
    masked = [make_batch([[1, 2, 3, 4, 5], [2, 3, 4]], supervised_from=[3, 1])]
    assert trainer_num_items(masked) == shifted_num_items(masked) == 4
    unmasked = [make_batch([[1, 2, 3, 4, 5], [2, 3, 4]], supervised_from=[0, 0])]
    assert trainer_num_items(unmasked) == shifted_num_items(unmasked) + 2 == 8
    assert int(sum(b["labels"].ne(-100).sum() for b in unmasked)) == trainer_num_items(unmasked)
    assert torch.equal(unmasked[0]["labels"][:, 0] != -100, torch.tensor([True, True]))


def test_the_chapter_states_what_the_trainer_really_counts():
    notebook = json.loads(Path("notebooks/15-sft-training-loop.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    assert "做的是同一件事" not in text, "the Trainer does not count after the shift"
    assert "labels.ne(-100)" in text and "_get_num_items_in_batch" in text
