"""Modules and loss functions that chapter 76's tests hand to `saved_tensor_ledger` and `offloaded_step`.

A test cell runs in the trusted grader process and the learner's function in the learner's kernel, so
every module class and loss function a test passes to it is defined here, at module level: it crosses
the grading boundary by reference (a lambda or a class defined in a test cell cannot). Each module
saves known tensors for backward, so the counts and bytes a correct ledger reports follow from the
module alone. Nothing here prints.
"""

from __future__ import annotations

import torch
from torch import nn


class KnownSaves(torch.autograd.Function):
    """y = x * weight; saves x (an activation), weight (a parameter) and x[:, :1] (a view of x). Its
    backward refuses a restored view whose shape or dtype is not the one saved."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight, x[:, :1])
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, first_column = ctx.saved_tensors
        if tuple(first_column.shape) != (x.shape[0], 1) or first_column.dtype != x.dtype:
            raise ValueError(f"a saved view came back as {tuple(first_column.shape)} {first_column.dtype}")
        return grad * weight, (grad * x).sum(0)


class KnownSavesModule(nn.Module):
    """One KnownSaves step with a learnable weight."""

    def __init__(self, width: int, dtype=torch.float32):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width, dtype=dtype))

    def forward(self, x):
        return KnownSaves.apply(x, self.weight)


class SavesSlices(torch.autograd.Function):
    """Saves two views of one input storage (a row slice and a column slice) and a transposed weight."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x[1:], x[:, :2], weight.t())
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        tail, left, weight_t = ctx.saved_tensors
        return grad * weight_t.t(), None


class SlicesModule(nn.Module):
    """One SavesSlices step with a [3, 4] weight of ones."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, 4))

    def forward(self, x):
        return SavesSlices.apply(x, self.weight)


class SavesThreeViews(torch.autograd.Function):
    """Saves an input, two views of it and the weight; backward checks the views' shapes and dtype."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, x[:1], x[:, 1:], weight)
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        x, first_row, rest, weight = ctx.saved_tensors
        if first_row.shape != (1, x.shape[1]) or rest.shape != (x.shape[0], x.shape[1] - 1) or rest.dtype != x.dtype:
            raise ValueError("a saved view came back with another shape or dtype")
        return grad * weight, (grad * x).sum(0)


class ThreeViews(nn.Module):
    """One SavesThreeViews step with a float16 weight of 0.5."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.full((4,), 0.5, dtype=torch.float16))

    def forward(self, x):
        return SavesThreeViews.apply(x, self.weight)


class ChangesWhatItSaved(nn.Module):
    """`activation` (tanh or sigmoid, which save their output) then a sum of `power`; the module then
    multiplies that output in place by `factor`, after it was saved: only a real host copy keeps the
    values the activation saved. Returns the scalar."""

    def __init__(self, seed: int, width_in: int, width_out: int, activation: str = "tanh", power: int = 1,
                 factor: float = 0.5):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = nn.Linear(width_in, width_out)
        self.activation, self.power, self.factor = activation, power, factor

    def forward(self, x):
        y = getattr(torch, self.activation)(self.linear(x))
        total = y.pow(self.power).sum()
        y.mul_(self.factor)
        return total


def summed(module, batch):
    return module(batch).sum()


def squared_sum(module, batch):
    return module(batch).pow(2).sum()


def square_mean(module, batch):
    return module(batch).pow(2).mean()


def softplus_sum(module, batch):
    return nn.functional.softplus(module(batch)).sum()


def float_sum(module, batch):
    return module(batch).float().sum()


def forward_only(module, batch):
    """The module's own output as the loss (a module that returns a scalar)."""
    return module(batch)


def weight_only(module, batch):
    """A loss that uses the weight alone: the step saves no activation."""
    return (module.weight * 2.0).sum()


def row_losses(module, batch):
    """Not a loss: one value per row."""
    return module(batch).pow(2).mean(-1)


def column_sums(module, batch):
    """Not a loss: one value per column."""
    return module(batch).sum(0)


def detached(module, batch):
    """Not a loss: a 0-dim value without a graph."""
    return module(batch).pow(2).mean().detach()


def detached_sum(module, batch):
    return module(batch).sum().detach()


def integer_constant(module, batch):
    """Not a loss: a 0-dim integer tensor."""
    return torch.tensor(3)


def must_not_run(module, batch):
    """Passed beside an argument the function must refuse first: calling it is the failure."""
    raise RuntimeError("loss_fn was called before the module was checked")
