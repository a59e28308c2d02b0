"""Chapter 76's test probes: they cross the grading boundary by reference and catch what they are for."""

from __future__ import annotations

import pytest
import torch

from tools.chapters import saved_tensor_probes as probes
from tools.course.grader.boundary import Contract, InProcessChannel, LearnerFunction

LEARNER = '''
def step(module, batch, loss_fn):
    loss = loss_fn(module, batch)
    loss.backward()
    return float(loss.detach())
'''


def _across_the_boundary():
    learner = {"__name__": "__main__"}
    exec(LEARNER, learner)  # noqa: S102 - the test's own learner code
    return LearnerFunction("step", InProcessChannel(learner), {}, Contract(("module", "batch", "loss_fn"), frozenset({"module"})))


def test_probes_cross_the_boundary_and_their_gradients_come_back():
    step = _across_the_boundary()
    module, local = probes.KnownSavesModule(4, dtype=torch.float64), probes.KnownSavesModule(4, dtype=torch.float64)
    x = torch.arange(12.0, dtype=torch.float64).reshape(3, 4)
    assert step(module, x, probes.summed) == 71.0
    probes.summed(local, x).backward()
    assert torch.equal(module.weight.grad, local.weight.grad) and torch.equal(module.weight.grad, x.sum(0))
    with pytest.raises(RuntimeError, match="before the module was checked"):
        step(module, x, probes.must_not_run)


def test_a_module_that_changes_what_it_saved_fails_without_a_real_copy():
    module = probes.ChangesWhatItSaved(0, 3, 3, activation="tanh", power=1, factor=0.5)
    loss = probes.forward_only(module, torch.randn(4, 3, generator=torch.Generator().manual_seed(1)))
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()  # tanh's saved output was changed in place: only a host copy of it can be used


def test_known_saves_refuses_a_restored_view_of_another_shape():
    def pack(tensor):
        return tensor

    def unpack(tensor):
        return tensor[:1] if tensor.dim() == 2 and tensor.shape[1] == 1 else tensor  # a wrong restore

    module = probes.KnownSavesModule(4)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = probes.summed(module, torch.ones(3, 4))
    with pytest.raises(ValueError, match="saved view"):
        loss.backward()
