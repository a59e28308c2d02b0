"""Planted solutions every exercise gets for free: one that refuses every input, one constant, and each
mutant again with an in-place overwrite of each argument.

A grader gives free points when a body that only raises (or only returns one value) passes some of
its exercise's tests: an invalid-input test that draws only invalid inputs, a visible test that
checks a single call. `grading verify` plants both bodies for every exercise of every chapter, so
a new chapter is checked without writing them, and each must keep at most `NEAR_ZERO_SHARE` of its
exercise's points.

* `raising_solution`: raises, on every call, the exception class the reference raises most often
  (the contract's error, so tests that expect it are not failed by a wrong class).
* `constant_solution`: returns one value on every call, a plausible and hard one: the reference's
  result on the first call the reference accepts (the visible test's first valid input, since that
  test runs first). The reference runs on a copy of that call's arguments, so the constant has no
  effect on its inputs; calls before it return None.
* `overwriting_solution`: a planted wrong solution (a mutant) that, after computing its result, overwrites
  arguments in place (tensors and a module's parameters and buffers zeroed, numbers in lists and dicts
  set to 0, strings emptied, sets cleared), as `logits.zero_()` did to tests that read their expected
  value from the argument after the call (`overwrite_plans`: each argument the contract lets the function
  change alone, the others together). It must still lose points: the boundary brings back only the
  changes a contract declares, and fails a call that changed anything else.
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter

NEAR_ZERO_SHARE = 0.10
"""The most a planted raising or constant body may keep of its exercise's points (a share)."""

DEFAULT_ERROR = "ValueError"
RAISES, CONSTANT = "raises", "constant"
DESCRIPTIONS = {RAISES: "raises the contract's error on every input",
                CONSTANT: "returns the reference's first result on every input"}


def contract_error(reference: str, name: str) -> str:
    """The built-in exception class that function `name` of `reference` raises most often."""
    function = next((node for node in ast.parse(reference).body
                     if isinstance(node, ast.FunctionDef) and node.name == name), None)
    raised = Counter()
    for node in ast.walk(function) if function is not None else ():
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name):
                raised[target.id] += 1
    for class_name, _ in raised.most_common():
        found = getattr(builtins, class_name, None)
        if isinstance(found, type) and issubclass(found, Exception):
            return class_name
    return DEFAULT_ERROR


def raising_solution(reference: str, name: str) -> str:
    """Source of `name` whose body raises the contract's error on every input."""
    error = contract_error(reference, name)
    return (f"def {name}(*args, **kwargs):\n"
            f'    """Planted: refuses every input."""\n'
            f'    raise {error}("planted solution: refuses every input")\n')


def constant_solution(reference: str, name: str) -> str:
    """Source of `name` that returns one constant: the reference's result on the first accepted call."""
    return f'''def {name}(*args, **kwargs):
    """Planted: returns one constant, the reference's result on the first call the reference accepts."""
    import copy as _copy

    def _copied(value):
        try:
            return _copy.deepcopy(value)
        except Exception:
            return value

    if "_planted_constant" not in {name}.__dict__:
        _scope = dict(globals())
        exec(compile({reference!r}, "<reference solution>", "exec"), _scope)
        try:
            _args, _kwargs = _copied((args, kwargs))
            {name}._planted_constant = _scope[{name!r}](*_args, **_kwargs)
        except Exception:
            return None
    return _copied({name}._planted_constant)
'''


def degenerate_solutions(reference: str, name: str) -> dict[str, str]:
    """`kind -> source` of both planted bodies of exercise `name`."""
    return {RAISES: raising_solution(reference, name), CONSTANT: constant_solution(reference, name)}


OVERWRITE = "overwrite"
_OVERWRITE_WRAPPER = '''


_planted_wrong_{name} = {name}


def {name}(*args, **kwargs):
    """Planted: the wrong solution above, then an in-place overwrite of its arguments {parameters!r}."""
    import torch as _torch

    def _overwrite(value, depth=0):
        if depth > 6:
            return value
        if isinstance(value, _torch.nn.Module):
            with _torch.no_grad():
                for _tensor in [*value.parameters(), *value.buffers()]:
                    _tensor.zero_()
            return value
        if isinstance(value, _torch.Tensor):
            with _torch.no_grad():
                value.zero_()
            return value
        if type(value) is bool:
            return False
        if type(value) in (int, float):
            return type(value)(0)
        if type(value) is str:
            return ""
        if isinstance(value, list):
            value[:] = [_overwrite(item, depth + 1) for item in value]
        elif isinstance(value, dict):
            for _key in list(value):
                value[_key] = _overwrite(value[_key], depth + 1)
        elif isinstance(value, set):
            value.clear()
        elif isinstance(value, tuple):
            for _item in value:
                _overwrite(_item, depth + 1)
        return value

    _result = _planted_wrong_{name}(*args, **kwargs)
    for _position, _parameter in {positions!r}:
        if len(args) > _position:
            _overwrite(args[_position])
        elif _parameter in kwargs:
            _overwrite(kwargs[_parameter])
    return _result
'''


def overwriting_solution(mutant: str, name: str, parameters: list[tuple[int, str]]) -> str:
    """Source of `name`: the `mutant`'s function, whose arguments `parameters` (`(position, name)`, passed by
    position or keyword) are overwritten in place after each call (see the module docstring)."""
    return mutant + _OVERWRITE_WRAPPER.format(name=name, parameters=[parameter for _, parameter in parameters],
                                              positions=list(parameters))


def overwrite_plans(parameters: tuple[str, ...], changes: frozenset[str]) -> dict[str, list[tuple[int, str]]]:
    """Which arguments each planted overwrite changes: every argument the contract lets the function change on
    its own (the boundary brings those changes back, so each is a plant of its own), and all the others at once
    (the boundary fails any call that changes one of them)."""
    plans = {parameter: [(position, parameter)] for position, parameter in enumerate(parameters) if parameter in changes}
    others = [(position, parameter) for position, parameter in enumerate(parameters) if parameter not in changes]
    if others:
        plans["undeclared"] = others
    return plans
