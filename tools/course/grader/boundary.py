"""The grading boundary: test cells run in a trusted process, the learner's functions in the learner's.

In the trusted namespace every exercise name is a `LearnerFunction`: calling it sends the arguments
(`codec.dump_call`) over a `Channel` to the learner's process, where `serve_request` runs the learner's
function of that name and answers with the result and the post-call state of the arguments, safely
encoded (`codec.encode`). The proxy decodes them and returns the result or raises the same built-in
exception class. In-place effects come back only where the exercise's contract declares them
(`Contract.changes`: the arguments the function may change, mirrored onto the trusted arguments with
`mirror`); every other argument is compared with its state after the call (`changed`), and a call
that changed one fails with `InputsChanged`, so no verdict is ever computed from state the learner's
process wrote.

* `call_many` sends many argument tuples in one round trip (differential tests).
* `backward_through` computes a gradient through the learner's function in the learner's process and
  brings the gradients of the arguments back (a result crosses without its autograd graph).
* `run_cell` executes one test cell in the trusted namespace and returns its outputs as nbformat
  shapes, the way nbgrader scores them (error, stderr, last expression's value).
* `InProcessChannel` serves the learner side in the same process through the same encoding: the grading
  oracle uses it, so that its verdicts follow the same boundary semantics as class grading.
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import linecache
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tools.course.grader.codec import (
    is_tensor,
    MAX_REPLY_BYTES,
    CodecError,
    LearnerError,
    Unencodable,
    decode,
    dump_call,
    encode,
    exception_record,
    load_call,
    rebuild_exception,
)

_CELL_NUMBERS = itertools.count(1)
OUTPUT_CHARS = 100_000
"""What one trusted cell's captured stdout or stderr keeps (the rest is cut, marked)."""


class BoundaryError(RuntimeError):
    """The learner's process could not be reached or answered something that is not a valid reply."""


class CellTimeout(BaseException):
    """A cell (with the learner calls it made) ran past the per-cell limit. A BaseException, so that a
    test's `except Exception` cannot swallow it."""


# ---------------------------------------------------------------------------
# Argument state: captured after the call in the learner's process, mirrored in the trusted one
# ---------------------------------------------------------------------------

def _is_module(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def _is_optimizer(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.optim.Optimizer)


_PLAIN = (type(None), bool, int, float, str, bytes)


def _plain_key(key: Any) -> bool:
    return type(key) in _PLAIN or (type(key) is tuple and all(_plain_key(item) for item in key))


def state_of(value: Any, depth: int = 0) -> tuple:
    """What a mutable argument looks like after the call, as plain data the codec carries."""
    if depth > 32:
        return ("?",)
    if type(value) in _PLAIN:
        return ("V", value)
    if is_tensor(value):
        return ("T", value.detach(), None if value.grad is None else value.grad.detach(), bool(value.requires_grad))
    if type(value) is list:
        return ("L", [state_of(item, depth + 1) for item in value])
    if type(value) is tuple:
        return ("U", [state_of(item, depth + 1) for item in value])
    if type(value) is dict:
        if not all(_plain_key(key) for key in value):
            return ("?",)
        return ("D", [(key, state_of(item, depth + 1)) for key, item in value.items()])
    if type(value) in (set, frozenset):
        return ("S", value) if all(_plain_key(item) for item in value) else ("?",)
    if _is_module(value):
        return ("M", [(name, state_of(parameter, depth + 1)) for name, parameter in value.named_parameters()],
                [(name, buffer.detach()) for name, buffer in value.named_buffers()],
                [(name, module.training) for name, module in value.named_modules()])
    if _is_optimizer(value):
        return ("O", value.state_dict())
    return ("?",)


def carries_grads(value: Any, depth: int = 0) -> bool:
    """True when a tensor in `value` (or a parameter of a module in it) has a `.grad`, which pickling drops."""
    if depth > 32:
        return False
    if is_tensor(value):
        return value.grad is not None
    if type(value) in (list, tuple):
        return any(carries_grads(item, depth + 1) for item in value)
    if type(value) is dict:
        return any(carries_grads(item, depth + 1) for item in value.values())
    if _is_module(value):
        return any(parameter.grad is not None for parameter in value.parameters())
    return False


def rebuild(state: tuple) -> Any:
    """A new value from a captured state (modules, optimisers and unknown objects cannot be rebuilt)."""
    kind = state[0]
    if kind == "V":
        return state[1]
    if kind == "T":
        tensor = state[1]
        if state[3] and (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
            tensor.requires_grad_(True)
        if state[2] is not None:
            tensor.grad = state[2]
        return tensor
    if kind == "L":
        return [rebuild(item) for item in state[1]]
    if kind == "U":
        return tuple(rebuild(item) for item in state[1])
    if kind == "D":
        return {key: rebuild(item) for key, item in state[1]}
    if kind == "S":
        return frozenset(state[1]) if type(state[1]) is frozenset else set(state[1])
    raise BoundaryError(f"cannot rebuild a {kind!r} state")


def _mutable_kind(value: Any) -> str | None:
    if is_tensor(value):
        return "T"
    if type(value) is list:
        return "L"
    if type(value) is dict:
        return "D"
    if type(value) in (set, frozenset):
        return "S"
    if type(value) is tuple:
        return "U"
    if _is_module(value):
        return "M"
    if _is_optimizer(value):
        return "O"
    return None


def mirror(target: Any, state: tuple) -> None:
    """Apply the learner side's post-call `state` to the trusted `target` in place, as far as it can be."""
    kind = state[0]
    if kind in ("V", "?") or _mutable_kind(target) != kind:
        return
    torch = sys.modules.get("torch")  # imported wherever a tensor, module or optimiser exists
    if kind == "T":
        _, data, grad, requires_grad = state
        with torch.no_grad():
            if target.dtype == data.dtype and target.shape == data.shape:
                if not torch.equal(target, data):
                    target.copy_(data)
            else:
                target.data = data
        if target.is_leaf and target.requires_grad != requires_grad and (
                target.dtype.is_floating_point or target.dtype.is_complex):
            target.requires_grad_(requires_grad)
        if target.is_leaf and (target.grad is not None or grad is not None):
            target.grad = grad
    elif kind == "L":
        items = state[1]
        for index, item in enumerate(items[:len(target)]):
            _mirror_slot(target, index, item)
        del target[len(items):]
        target.extend(rebuild(item) for item in items[len(target):])
    elif kind == "U":
        for value, item in zip(target, state[1]):
            mirror(value, item)
    elif kind == "D":
        items = dict(state[1])
        for key in [key for key in target if key not in items]:
            del target[key]
        for key, item in items.items():
            if key in target:
                _mirror_slot(target, key, item)
            else:
                target[key] = rebuild(item)
        if list(target) != list(items):  # the learner reordered the keys
            ordered = [(key, target[key]) for key in items]
            target.clear()
            target.update(ordered)
    elif kind == "S":
        if type(target) is set and target != state[1]:  # a frozenset cannot have changed
            target.clear()
            target.update(state[1])
    elif kind == "M":
        _, parameters, buffers, training = state
        own = dict(target.named_parameters())
        for name, item in parameters:
            if name in own:
                mirror(own[name], item)
        own_buffers = dict(target.named_buffers())
        with torch.no_grad():
            for name, value in buffers:
                if name in own_buffers and own_buffers[name].shape == value.shape:
                    own_buffers[name].copy_(value)
        modules = dict(target.named_modules())
        for name, flag in training:
            if name in modules:
                modules[name].training = flag
    elif kind == "O":
        target.load_state_dict(state[1])


def _mirror_slot(container, key, item: tuple) -> None:
    current = container[key]
    if item[0] != "?" and _mutable_kind(current) == item[0] and item[0] != "V":
        mirror(current, item)
    elif item[0] not in ("?", "M", "O"):
        new = rebuild(item)
        if not (type(new) is type(current) and _same_plain(new, current)):
            container[key] = new


def _same_plain(left, right) -> bool:
    try:
        if type(left) is float and type(right) is float and left != left and right != right:
            return True  # NaN stays NaN
        return bool(left == right) if type(left) in _PLAIN else False
    except Exception:  # noqa: BLE001 - an odd __eq__: treat as changed
        return False


def _same_tensor(left, right) -> bool:
    """Same dtype, shape and values (NaN where NaN), without trusting any subclass."""
    torch = sys.modules.get("torch")
    if left.dtype != right.dtype or tuple(left.shape) != tuple(right.shape):
        return False
    left, right = left.detach(), right.detach()
    if left.dtype.is_floating_point or left.dtype.is_complex:
        return bool(((left == right) | (torch.isnan(left) & torch.isnan(right))).all())
    return bool(torch.equal(left, right))


def _grad_changed(target, grad) -> bool:
    current = target.grad
    if current is None or grad is None:
        return (current is None) != (grad is None)
    return not _same_tensor(current, grad)


def changed(target: Any, state: tuple, *, grads: bool = False, path: str = "", skip=frozenset()) -> str | None:
    """Where the learner side's post-call `state` differs from the trusted `target` (which the call did not
    touch: it went as a copy), e.g. "[0]['ids']: tensor values, dtype or shape changed", or None when it is the same. With
    `grads`, gradients may differ (a `backward_through` call brings them back). Objects whose id is in
    `skip` (setup objects that went by name) are not compared here. An unknown state ("?") compares equal:
    nothing of it comes back either."""
    kind = state[0]
    if id(target) in skip or kind == "?":
        return None
    where = f"{path}: " if path else ""
    if kind == "V":
        return None if _same_plain(target, state[1]) else f"{where}value changed"
    if _mutable_kind(target) != kind:
        return f"{where}became a different kind of value"
    if kind == "T":
        _, data, grad, requires_grad = state
        if not _same_tensor(target, data):
            return f"{where}tensor values, dtype or shape changed"
        if bool(target.requires_grad) != bool(requires_grad):
            return f"{where}requires_grad changed"
        if not grads and _grad_changed(target, grad):
            return f"{where}gradient (.grad) changed"
        return None
    if kind in ("L", "U"):
        items = state[1]
        if len(items) != len(target):
            return f"{where}length changed from {len(target)} to {len(items)}"
        for index, (value, item) in enumerate(zip(target, items)):
            found = changed(value, item, grads=grads, path=f"{path}[{index}]", skip=skip)
            if found:
                return found
        return None
    if kind == "D":
        items = state[1]
        if [key for key, _ in items] != list(target):
            return f"{where}keys changed"
        for key, item in items:
            found = changed(target[key], item, grads=grads, path=f"{path}[{key!r}]", skip=skip)
            if found:
                return found
        return None
    if kind == "S":
        return None if target == state[1] else f"{where}set members changed"
    if kind == "M":
        _, parameters, buffers, training = state
        own = dict(target.named_parameters())
        if [name for name, _ in parameters] != list(own):
            return f"{where}parameters added or removed"
        for name, item in parameters:
            found = changed(own[name], item, grads=grads, path=f"{path}.{name}", skip=skip)
            if found:
                return found
        own_buffers = dict(target.named_buffers())
        for name, value in buffers:
            if name not in own_buffers or not _same_tensor(own_buffers[name], value):
                return f"{path}.{name}: buffer changed"
        modules = dict(target.named_modules())
        if any(name in modules and modules[name].training != flag for name, flag in training):
            return f"{where}train/eval mode changed"
        return None
    if kind == "O":
        return None if _same_structure(target.state_dict(), state[1]) else f"{where}optimiser state changed"
    return None


def _same_structure(left: Any, right: Any) -> bool:
    """Equal nested plain data and tensors (an optimiser's state dict)."""
    if is_tensor(left) or is_tensor(right):
        return is_tensor(left) and is_tensor(right) and _same_tensor(left, right)
    if type(left) is not type(right):
        return False
    if type(left) is dict:
        return list(left) == list(right) and all(_same_structure(left[key], right[key]) for key in left)
    if type(left) in (list, tuple):
        return len(left) == len(right) and all(_same_structure(a, b) for a, b in zip(left, right))
    return _same_plain(left, right) or left == right


def mirror_grads(target: Any, state: tuple) -> None:
    """Apply only the gradients of a post-call `state` (what `backward_through` brings back)."""
    kind = state[0]
    if kind == "T" and _mutable_kind(target) == "T":
        if target.is_leaf and (target.grad is not None or state[2] is not None):
            target.grad = state[2]
    elif kind in ("L", "U") and _mutable_kind(target) == kind:
        for value, item in zip(target, state[1]):
            mirror_grads(value, item)
    elif kind == "D" and _mutable_kind(target) == "D":
        for key, item in state[1]:
            if key in target:
                mirror_grads(target[key], item)
    elif kind == "M" and _mutable_kind(target) == "M":
        own = dict(target.named_parameters())
        for name, item in state[1]:
            if name in own:
                mirror_grads(own[name], item)


class InputsChanged(LearnerError):
    """A learner's function changed an argument its contract does not let it change (the call fails: nothing
    of that change reaches the test)."""


@dataclass(frozen=True)
class Contract:
    """What the trusted side knows of an exercise's signature: its positional parameter names, in order,
    and the names of the arguments the function may change in place (its contract declares them)."""

    parameters: tuple[str, ...] = ()
    changes: frozenset[str] = frozenset()

    def argument_name(self, position: int | str) -> str:
        if isinstance(position, str):
            return position
        return self.parameters[position] if position < len(self.parameters) else f"argument {position + 1}"

    def to_json(self) -> dict:
        return {"parameters": list(self.parameters), "changes": sorted(self.changes)}

    @classmethod
    def from_json(cls, data: dict) -> Contract:
        return cls(tuple(data.get("parameters", ())), frozenset(data.get("changes", ())))


CHANGES_KEY = "changes"
"""`metadata.course.changes` of an exercise cell: the parameters its function may change in place."""


def parameter_names(source: str, name: str) -> tuple[str, ...]:
    """The positional parameter names of function `name` defined in `source` (empty if it defines none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return tuple(argument.arg for argument in [*node.args.posonlyargs, *node.args.args])
    return ()


def exercise_contract(name: str, source: str, metadata: dict) -> Contract:
    """The contract of exercise `name` from its (solution) cell: the signature in `source`, the changes its
    metadata (`course.changes`) declares."""
    changes = (metadata.get("course") or {}).get(CHANGES_KEY) or []
    return Contract(parameter_names(source, name), frozenset(changes))


# ---------------------------------------------------------------------------
# The learner's side
# ---------------------------------------------------------------------------

LEARNER_PRINT_CHARS = 20_000
"""What one call of a learner's function may print (stdout and stderr each) that the test's output shows."""


def _without_grads(state: tuple) -> tuple:
    kind = state[0]
    if kind == "T":
        return ("T", state[1], None, state[3])
    if kind in ("L", "U"):
        return (kind, [_without_grads(item) for item in state[1]])
    if kind == "D":
        return ("D", [(key, _without_grads(item)) for key, item in state[1]])
    if kind == "M":
        return ("M", [(name, _without_grads(item)) for name, item in state[1]], state[2], state[3])
    return state


def _fingerprint(value: Any, grads: bool = True) -> bytes | None:
    """A digest of what `state_of` sees of `value` (without gradients unless `grads`); None when it cannot
    be taken."""
    import hashlib
    import pickle

    try:
        state = state_of(value) if grads else _without_grads(state_of(value))
        return hashlib.sha256(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    except Exception:  # noqa: BLE001 - an object that cannot be pickled: its changes are not seen
        return None


def _outcome(function: Callable, args: tuple, kwargs: dict, after=None, shared: dict | None = None) -> dict:
    """Run the learner's function (then `after(value)`, e.g. a backward pass); the result (or exception),
    the arguments' state, the names of the setup objects (`shared`, sent by name) the call changed, and
    what the call printed, as plain data. KeyboardInterrupt (the grader interrupting a call past its time)
    ends the serving instead."""
    stdout, stderr = _Capped(LEARNER_PRINT_CHARS), _Capped(LEARNER_PRINT_CHARS)
    grads = after is None  # a backward pass (`after`) may set gradients
    before = {name: _fingerprint(value, grads) for name, value in (shared or {}).items()}
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            value = function(*args, **kwargs)
            if after is not None:
                after(value)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - its class crosses back (SystemExit as a generic error)
        outcome = {"raised": exception_record(error)["exception"]}
    else:
        outcome = {"value": value}
    outcome.update(state=state_of((args, kwargs)), stdout=stdout.text() if stdout.tell() else "",
                   stderr=stderr.text() if stderr.tell() else "")
    touched = sorted(name for name, digest in before.items() if _fingerprint(shared[name], grads) != digest)
    if touched:
        outcome["shared_changed"] = touched
    return outcome


def _encode_reply(reply: Any, limit: int) -> bytes:
    try:
        return encode(reply, limit)
    except (Unencodable, RecursionError, ValueError, TypeError) as error:
        # the result (or an argument's new state) cannot cross: say so, as the learner's error
        return encode({"unencodable": f"{error.__class__.__name__}: {error}"[:2000]}, limit)


def _select(value: Any, path: list) -> Any:
    for key in path:
        value = value[key]
    return value


REDUCTIONS = {
    "sum": lambda part: part.sum(),
    "mean": lambda part: part.mean(),
    "square_sum": lambda part: part.square().sum(),
    None: lambda part: part,
}
"""How `backward_through` turns the selected part of a result into the scalar it differentiates."""


def _loss(selected, reduce, weights):
    if weights is not None:
        return (selected * weights).sum()
    return reduce(selected) if callable(reduce) else REDUCTIONS[reduce](selected)


def serve_request(payload: bytes, namespace: dict, limit: int = MAX_REPLY_BYTES) -> bytes:
    """In the learner's process: run one request from the trusted side; return the encoded reply.

    Requests: `call` (one argument tuple), `call_many` (a list of them), `gradient` (one call, then
    backward through the selected, reduced part of its result). Each runs in the caller's grad mode."""
    shared: dict = {}
    request = load_call(payload, namespace, shared)
    request["shared"] = shared
    if request.get("grads") is not None:  # pickling drops `.grad`: the arguments' gradients come as a state
        mirror((request["args"], request["kwargs"]), request["grads"])
    function = namespace.get(request["name"])
    if function is None or not callable(function):
        error = NameError(f"name {request['name']!r} is not defined")
        return encode({"raised": exception_record(error)["exception"], "state": ("?",)}, limit)
    torch = sys.modules.get("torch")
    if torch is not None and request.get("grad_enabled") is not None:  # the caller's grad mode, as a local call has it
        with torch.set_grad_enabled(bool(request["grad_enabled"])):
            return _serve(request, function, limit)
    return _serve(request, function, limit)


def _serve(request: dict, function: Callable, limit: int) -> bytes:
    shared = request["shared"]
    if request["op"] == "call":
        return _encode_reply(_outcome(function, request["args"], request["kwargs"], shared=shared), limit)
    if request["op"] == "call_many":
        for case, grads in zip(request["cases"], request.get("grads_per_case") or []):
            if grads is not None:
                mirror(case, grads)
        return _encode_reply({"many": [_outcome(function, args, kwargs, shared=shared)
                                       for args, kwargs in request["cases"]]}, limit)
    if request["op"] == "gradient":
        def backward(value):
            _loss(_select(value, request["select"]), request["reduce"], request.get("weights")).backward()

        return _encode_reply(_outcome(function, request["args"], request["kwargs"], backward, shared=shared), limit)
    raise BoundaryError(f"unknown request {request['op']!r}")


# ---------------------------------------------------------------------------
# The trusted side
# ---------------------------------------------------------------------------

class Channel(Protocol):
    def exchange(self, payload: bytes) -> bytes: ...


def process_state() -> dict:
    """The process-wide state that two processes would each have of their own: the random generators
    (random, torch's CPU generator, numpy's when imported), torch's grad mode and default dtype."""
    import random

    state = {"random": random.getstate()}
    torch = sys.modules.get("torch")
    if torch is not None:
        state.update(torch=torch.random.get_rng_state(), grad=torch.is_grad_enabled(), dtype=torch.get_default_dtype())
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    return state


def restore_process_state(state: dict) -> None:
    import random

    random.setstate(state["random"])
    torch = sys.modules.get("torch")
    if torch is not None:
        if "torch" in state:
            torch.random.set_rng_state(state["torch"])
            torch.set_grad_enabled(state["grad"])
            torch.set_default_dtype(state["dtype"])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in state:
        numpy.random.set_state(state["numpy"])


class InProcessChannel:
    """The learner's side in this process (the grading oracle): same encoding, no second process. The
    learner's side keeps process state of its own (`process_state`), swapped in while its code runs,
    as if it ran in a process of its own."""

    def __init__(self, namespace: dict, limit: int = MAX_REPLY_BYTES, learner_state: dict | None = None):
        self.namespace, self.limit = namespace, limit
        self.learner_state = learner_state

    @contextlib.contextmanager
    def learner_side(self):
        """Run the learner's code (a call, or a solution cell) with the learner's process state."""
        trusted = process_state()
        if self.learner_state is not None:
            restore_process_state(self.learner_state)
        try:
            yield
        finally:
            self.learner_state = process_state()
            restore_process_state(trusted)

    def exchange(self, payload: bytes) -> bytes:
        with self.learner_side():
            return serve_request(payload, self.namespace, self.limit)


class LearnerFunction:
    """The learner's function `name` as seen from the trusted side (see the module docstring)."""

    def __init__(self, name: str, channel: Channel, shared: dict[int, str], contract: Contract | None = None,
                 observer: Callable[[tuple, dict], None] | None = None):
        self.__name__ = self.__qualname__ = name
        self._channel, self._shared = channel, shared
        self.contract = contract or Contract()
        self.observer = observer  # sees every call's arguments before they are sent (the leak scan's record)

    def __repr__(self) -> str:
        return f"<learner's function {self.__name__}>"

    def _request(self, request: dict) -> Any:
        request = {"name": self.__name__, **request}
        if self.observer is not None:
            for args, kwargs in request["cases"] if request["op"] == "call_many" else [(request["args"],
                                                                                      request["kwargs"])]:
                self.observer(args, kwargs)
        torch = sys.modules.get("torch")
        if torch is not None:  # a call under torch.no_grad() runs under it in the learner's process too
            request["grad_enabled"] = torch.is_grad_enabled()
        if request.get("op") in ("call", "gradient") and carries_grads((request["args"], request["kwargs"])):
            request["grads"] = state_of((request["args"], request["kwargs"]))
        try:
            payload = dump_call(request, self._shared)
        except Exception as error:  # noqa: BLE001 - a lambda, or a class defined in a test cell
            raise BoundaryError(f"the arguments of {self.__name__} cannot be sent to the learner's process "
                                f"({error.__class__.__name__}: {error}); pass plain data, tensors, setup objects "
                                "or functions defined in a `tools` module") from None
        reply = self._channel.exchange(payload)
        try:
            return decode(reply)
        except CodecError as error:
            raise BoundaryError(f"{self.__name__}: the learner's process answered an invalid reply ({error})") from None

    def _arguments(self, args: tuple, kwargs: dict, state: tuple) -> list[tuple[str, Any, tuple]]:
        """`(parameter name, trusted value, post-call state)` of every argument of a call."""
        if not (isinstance(state, tuple) and len(state) == 2 and state[0] == "U" and isinstance(state[1], list)
                and len(state[1]) == 2):
            raise BoundaryError(f"{self.__name__}: invalid reply (the arguments' state)")
        positional, named = state[1]
        if positional[0] != "U" or len(positional[1]) != len(args) or named[0] != "D" \
                or [key for key, _ in named[1]] != list(kwargs):
            raise BoundaryError(f"{self.__name__}: invalid reply (the arguments' state)")
        found = [(self.contract.argument_name(index), value, item)
                 for index, (value, item) in enumerate(zip(args, positional[1]))]
        return found + [(key, kwargs[key], item) for key, item in named[1]]

    def _effects(self, outcome: dict, args: tuple, kwargs: dict, gradient: bool) -> None:
        """Mirror the declared arguments' changes (and, after `backward_through`, every argument's gradients);
        InputsChanged when the call changed anything else."""
        state = outcome.get("state")
        if state == ("?",):  # the function was not called (no such name); nothing of the arguments comes back
            return
        arguments = self._arguments(args, kwargs, state)
        declared = self.contract.changes
        skip = frozenset(self._shared)  # setup objects: their own process's copies; the learner side reports them
        problems = []
        try:
            for name, value, item in arguments:
                if name in declared:
                    mirror(value, item)
                elif gradient:
                    mirror_grads(value, item)
            for name, value, item in arguments:
                if name not in declared:
                    where = changed(value, item, grads=gradient, skip=skip)
                    if where:
                        problems.append(f"{name}: {where}")
        except (TypeError, ValueError, AttributeError, IndexError, KeyError, RuntimeError) as error:
            raise BoundaryError(f"{self.__name__}: the arguments' new state could not be applied: {error}") \
                from None
        declared_setup = {self._shared[id(value)] for name, value, _ in arguments
                          if name in declared and id(value) in self._shared}
        touched = outcome.get("shared_changed") or []
        problems += [f"the setup object {name!r}" for name in touched if isinstance(name, str)
                     and name not in declared_setup]
        if problems:
            allowed = (f"its contract lets it change only {', '.join(sorted(declared))}" if declared
                       else "its contract lets it change none of its arguments")
            raise InputsChanged(f"{self.__name__} changed its inputs ({'; '.join(problems[:3])}); {allowed}")

    def _finish(self, outcome: Any, args: tuple, kwargs: dict, gradient: bool = False) -> Any:
        if not isinstance(outcome, dict):
            raise BoundaryError(f"{self.__name__}: invalid reply")
        if "unencodable" in outcome:
            raise LearnerError(f"the result of {self.__name__} cannot cross the grading boundary: "
                               f"{outcome['unencodable']}")
        self._effects(outcome, args, kwargs, gradient)
        for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            if isinstance(outcome.get(name), str) and outcome[name]:
                stream.write(outcome[name])  # what the learner's code printed shows with the test's own output
        if "raised" in outcome:
            raise rebuild_exception(outcome["raised"])
        if "value" not in outcome:
            raise BoundaryError(f"{self.__name__}: invalid reply")
        return outcome["value"]

    def __call__(self, *args, **kwargs):
        return self._finish(self._request({"op": "call", "args": args, "kwargs": kwargs}), args, kwargs)

    def call_many(self, cases: list[tuple[tuple, dict]]) -> list[tuple[str, Any]]:
        """Call once per `(args, kwargs)` in one round trip; mirror each call's effects onto its own
        arguments; return `("value", result)` or `("raised", exception)` per case."""
        grads = [state_of(case) if carries_grads(case) else None for case in cases]
        reply = self._request({"op": "call_many", "cases": cases, "grads_per_case": grads})
        if isinstance(reply, dict) and "unencodable" in reply:
            error = LearnerError(f"a result of {self.__name__} cannot cross the grading boundary: "
                                 f"{reply['unencodable']}")
            return [("raised", error)] * len(cases)
        outcomes = reply.get("many") if isinstance(reply, dict) else None
        if not isinstance(outcomes, list) or len(outcomes) != len(cases):
            raise BoundaryError(f"{self.__name__}: invalid reply to {len(cases)} calls")
        results = []
        for outcome, (args, kwargs) in zip(outcomes, cases):
            try:
                results.append(("value", self._finish(outcome, args, kwargs)))
            except BoundaryError:
                raise
            except Exception as error:  # noqa: BLE001 - the learner's exception, rebuilt
                results.append(("raised", error))
        return results

    def gradient(self, args: tuple, kwargs: dict, select: list, reduce: str | None, weights) -> Any:
        request = {"op": "gradient", "args": args, "kwargs": kwargs, "select": list(select), "reduce": reduce,
                   "weights": weights}
        return self._finish(self._request(request), args, kwargs, gradient=True)


def learner_proxies(names: list[str], channel: Channel, shared: dict[int, str],
                    contracts: dict[str, Contract] | None = None,
                    observer: Callable[[tuple, dict], None] | None = None) -> dict[str, LearnerFunction]:
    return {name: LearnerFunction(name, channel, shared, (contracts or {}).get(name), observer) for name in names}


def backward_through(function: Callable, *args, select=(), reduce: str | Callable | None = "sum", weights=None,
                     **kwargs):
    """Call `function(*args, **kwargs)`, take the part of its result at `select` (keys or indexes, in
    order), reduce it to a scalar (`"sum"`, `"mean"`, `"square_sum"`, None for a 0-dim part, a function
    defined at module level in a `tools` module, or with `weights`: `(part * weights).sum()`) and run
    `backward()` on it, in the process where `function` lives; return the result. Afterwards the tensors
    among the arguments carry their `.grad` (accumulated, as `backward()` does), as if the test had called
    backward itself.

    A test that needs a gradient through the learner's function uses this helper: the result of a
    learner's function crosses the grading boundary without its autograd graph. In the learner's own
    notebook (no boundary) it computes the same thing in place."""
    if not (callable(reduce) or reduce in REDUCTIONS):
        raise ValueError(f"reduce must be one of {sorted(map(str, REDUCTIONS))} or a function, got {reduce!r}")
    if isinstance(function, LearnerFunction):
        return function.gradient(args, kwargs, list(select), reduce, weights)
    value = function(*args, **kwargs)
    _loss(_select(value, list(select)), reduce, weights).backward()
    return value


# ---------------------------------------------------------------------------
# Running one test cell in the trusted namespace
# ---------------------------------------------------------------------------

class _Capped(io.StringIO):
    def __init__(self, limit: int = OUTPUT_CHARS):
        super().__init__()
        self.limit, self.cut = limit, False

    def write(self, text: str) -> int:
        room = self.limit - self.tell()
        if room <= 0:
            self.cut = True
            return len(text)
        if len(text) > room:
            self.cut = True
        return super().write(text[:room])

    def text(self) -> str:
        return self.getvalue() + ("\n[output cut]\n" if self.cut else "")


def _on_alarm(signum, frame):
    raise CellTimeout("cell ran past the per-cell time limit")


def _split_last_expression(source: str, filename: str) -> tuple[ast.Module, ast.Expression | None]:
    tree = ast.parse(source, filename, "exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
        return tree, last
    return tree, None


def run_cell(source: str, namespace: dict, timeout_s: float | None = None) -> list[dict]:
    """Execute one cell in `namespace`; return its outputs as nbformat dicts: captured stdout and stderr
    (streams), then the error (ename, evalue, traceback) or the last expression's value (text/plain),
    as a kernel would report them to nbgrader."""
    stdout, stderr = _Capped(), _Capped()
    error, value = None, None
    filename = f"<cell {next(_CELL_NUMBERS)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show the lines
    if timeout_s:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                body, last = _split_last_expression(source, filename)
                exec(compile(body, filename, "exec"), namespace)  # noqa: S102 - the instructor's test cell
                if last is not None:
                    value = eval(compile(last, filename, "eval"), namespace)
            except SyntaxError as caught:
                error = caught
            except KeyboardInterrupt:
                raise
            except BaseException as caught:  # noqa: BLE001 - the cell's failure (timeout, SystemExit) is its output
                error = caught
    finally:
        if timeout_s:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    outputs = []
    for name, stream in (("stdout", stdout), ("stderr", stderr)):
        if stream.tell():
            outputs.append({"output_type": "stream", "name": name, "text": stream.text()})
    if error is not None:
        lines = traceback.format_exception(type(error), error, error.__traceback__)
        outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error)[:2000],
                        "traceback": [line.rstrip("\n") for line in lines[-20:]]})
    elif value is not None:
        outputs.append({"output_type": "execute_result", "data": {"text/plain": repr(value)[:OUTPUT_CHARS]},
                        "metadata": {}, "execution_count": None})
    return outputs


def deadline_after(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds
