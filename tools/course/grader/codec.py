"""The two directions of the grading boundary's wire format.

**Trusted → learner** (`dump_call`): arguments are pickled, since the learner's process may unpickle
what the grader sends. An object that is a value of the chapter's shared setup namespace (a tokenizer,
a model, a constant built by the locked setup cells) travels by name (`persistent_id`), so the learner's
function gets its own process's object of that name, as it would in the notebook.

**Learner → trusted** (`encode` / `decode`): never the plain unpickler. Results and the post-call state of
the arguments are encoded as JSON describing plain data, with tensors' bytes in a separate blob:
None, bool, int, float (exactly, NaN and infinities included), str, bytes, list, tuple, dict (any
decodable keys, in order), set, frozenset, torch tensors (values, dtype, shape, `requires_grad`, and
whether it is an `nn.Parameter`; no autograd graph), `torch.dtype`, `torch.Size`, and exceptions (the
nearest built-in class and its message). The decoder checks every size before it allocates and
refuses more than `MAX_REPLY_BYTES` in all, a JSON part of more than `MAX_TREE_BYTES` or `MAX_TREE_NODES`
containers (counted in the raw bytes before parsing) or a nesting deeper than `MAX_DEPTH` (`CodecError`).
"""

from __future__ import annotations

import builtins
import io
import json
import math
import pickle
import struct
from typing import Any

MAX_REPLY_BYTES = 64 * 2 ** 20
MAX_TREE_BYTES = 4 * 2 ** 20
MAX_TREE_NODES = 200_000
"""The JSON part of a reply (everything but tensors' and bytes' raw data) is bounded far below the reply: it is
parsed into Python objects (tens of bytes each), the blob is not. Both are checked before anything is parsed."""
MAX_DEPTH = 64
MAX_MESSAGE_CHARS = 2000
_HEADER = struct.Struct(">QQ")  # JSON length, blob length


class CodecError(ValueError):
    """Bytes that are not a valid encoding, or an encoding past the limits."""


class Unencodable(TypeError):
    """A value of a type the boundary does not carry back (e.g. an nn.Module, a generator, a custom object)."""


class LearnerError(Exception):
    """An exception of the learner's function whose class is not a built-in one (its name is in the message)."""


def _torch():
    import torch

    return torch


def is_tensor(value: Any) -> bool:
    """A torch tensor or parameter, recognised without importing torch."""
    return type(value).__module__.startswith("torch") and type(value).__name__ in ("Tensor", "Parameter")


# ---------------------------------------------------------------------------
# Learner -> trusted: the safe encoding
# ---------------------------------------------------------------------------

def builtin_exception_name(error: BaseException) -> str | None:
    """The most derived built-in exception class in `type(error)`'s MRO (e.g. ValueError for a subclass
    of it), or None when it is none but Exception, BaseException and object."""
    for cls in type(error).__mro__:
        if cls.__module__ == "builtins" and issubclass(cls, Exception) and cls is not Exception \
                and getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return None


class _Encoder:
    def __init__(self, limit: int):
        self.blob = io.BytesIO()
        self.limit = limit

    def __call__(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise Unencodable(f"nested deeper than {MAX_DEPTH} levels")
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return {"int": str(value)}
        if kind is float:
            return {"float": value.hex()}
        if kind is bytes:
            return {"bytes": self._bytes(value)}
        if kind in (list, tuple, set, frozenset):
            return {kind.__name__: [self(item, depth + 1) for item in value]}
        if kind is dict:
            return {"dict": [[self(key, depth + 1), self(item, depth + 1)] for key, item in value.items()]}
        if is_tensor(value):
            return self._tensor(value)
        torch = _torch() if type(value).__module__.startswith("torch") else None
        if torch is not None and kind is torch.dtype:
            return {"dtype": str(value).removeprefix("torch.")}
        if torch is not None and kind is torch.Size:
            return {"size": [int(item) for item in value]}
        if isinstance(value, BaseException):
            return exception_record(value)
        raise Unencodable(f"a {kind.__module__}.{kind.__qualname__} cannot cross the grading boundary "
                          "(plain data and tensors only)")

    def _bytes(self, data: bytes) -> list[int]:
        start = self.blob.tell()
        if start + len(data) > self.limit:
            raise Unencodable(f"more than {self.limit} bytes")
        self.blob.write(data)
        return [start, len(data)]

    def _tensor(self, value) -> dict:
        torch = _torch()
        if value.layout != torch.strided:
            raise Unencodable(f"a {value.layout} tensor cannot cross the grading boundary (strided tensors only)")
        data = value.detach().to("cpu")
        flat = data.reshape(-1)
        if flat.numel() and flat.stride(0) != 1:  # a view of one element keeps its parent's stride
            flat = flat.clone(memory_format=torch.contiguous_format)  # (x[:, :, 0] of a [1, 1, V] tensor)
        raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        return {"tensor": {"dtype": str(data.dtype).removeprefix("torch."), "shape": list(data.shape),
                           "requires_grad": bool(value.requires_grad),
                           "parameter": type(value).__name__ == "Parameter", "data": self._bytes(raw)}}


def exception_record(error: BaseException) -> dict:
    """How an exception crosses: its nearest built-in class (or None) and a capped message."""
    name = builtin_exception_name(error)
    message = str(error)[:MAX_MESSAGE_CHARS]
    if name is None:
        message = f"{type(error).__name__}: {message}"[:MAX_MESSAGE_CHARS]
    return {"exception": {"builtin": name, "message": message}}


def encode(value: Any, limit: int = MAX_REPLY_BYTES) -> bytes:
    """The safe encoding of `value` (raises Unencodable for a type the boundary does not carry)."""
    encoder = _Encoder(limit)
    tree = json.dumps(encoder(value), separators=(",", ":"), allow_nan=False).encode("utf-8")
    blob = encoder.blob.getvalue()
    if len(tree) + len(blob) > limit:
        raise Unencodable(f"more than {limit} bytes")
    problem = tree_problem(tree)
    if problem:
        raise Unencodable(problem)
    return _HEADER.pack(len(tree), len(blob)) + tree + blob


def tree_problem(tree: bytes) -> str | None:
    """Why the JSON part of a reply is past its limits (bytes, containers), or None. Containers are counted as
    `{` and `[` in the raw bytes, inside strings too: an over-count, never an under-count."""
    if len(tree) > MAX_TREE_BYTES:
        return f"a structure of {len(tree)} bytes, more than {MAX_TREE_BYTES} (tensors do not count)"
    nodes = tree.count(b"{") + tree.count(b"[")
    if nodes > MAX_TREE_NODES:
        return f"a structure of more than {MAX_TREE_NODES} nested values ({nodes}); return tensors or fewer items"
    return None


class _Decoder:
    def __init__(self, blob: memoryview):
        self.blob = blob

    def __call__(self, node: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise CodecError(f"nested deeper than {MAX_DEPTH} levels")
        if node is None or isinstance(node, (bool, str)):
            return node
        if not (isinstance(node, dict) and len(node) == 1):
            raise CodecError(f"not an encoded value: {type(node).__name__}")
        (kind, body), = node.items()
        if kind == "int":
            if not isinstance(body, str) or len(body) > 5000:
                raise CodecError("bad int")
            return int(body)
        if kind == "float":
            return float.fromhex(_str(body))
        if kind == "bytes":
            return bytes(self._slice(body))
        if kind in ("list", "tuple", "set", "frozenset"):
            items = [self(item, depth + 1) for item in _list(body)]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        if kind == "dict":
            result = {}
            for pair in _list(body):
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise CodecError("bad dict item")
                result[self(pair[0], depth + 1)] = self(pair[1], depth + 1)
            return result
        if kind == "tensor":
            return self._tensor(body)
        if kind == "dtype":
            return _dtype(_str(body))
        if kind == "size":
            return _torch().Size([_nonnegative(item) for item in _list(body)])
        if kind == "exception":
            return rebuild_exception(body)
        raise CodecError(f"unknown kind {kind!r}")

    def _slice(self, body) -> memoryview:
        start, length = (_nonnegative(item) for item in _list(body)) if len(_list(body)) == 2 else (None, None)
        if start is None or start + length > len(self.blob):
            raise CodecError("a byte range outside the reply")
        return self.blob[start:start + length]

    def _tensor(self, body) -> Any:
        torch = _torch()
        if not isinstance(body, dict):
            raise CodecError("bad tensor")
        dtype = _dtype(_str(body.get("dtype")))
        shape = [_nonnegative(item) for item in _list(body.get("shape"))]
        raw = self._slice(body.get("data"))
        count = math.prod(shape)
        if count * dtype.itemsize != len(raw):
            raise CodecError(f"tensor of shape {shape} and dtype {dtype}: {len(raw)} bytes")
        if count == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone()
        requires_grad = body.get("requires_grad") is True and (dtype.is_floating_point or dtype.is_complex)
        if body.get("parameter") is True:
            return torch.nn.Parameter(tensor, requires_grad=requires_grad)
        return tensor.requires_grad_(requires_grad)


def _str(value) -> str:
    if not isinstance(value, str):
        raise CodecError("expected a string")
    return value


def _list(value) -> list:
    if not isinstance(value, list):
        raise CodecError("expected a list")
    return value


def _nonnegative(value) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 62):
        raise CodecError("expected a size")
    return value


def _dtype(name: str):
    torch = _torch()
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise CodecError(f"unknown dtype {name!r}")
    return dtype


def rebuild_exception(body) -> BaseException:
    """The exception a record describes: the same built-in class, else `LearnerError`."""
    if not isinstance(body, dict):
        raise CodecError("bad exception")
    message = _str(body.get("message", ""))[:MAX_MESSAGE_CHARS]
    name = body.get("builtin")
    cls = getattr(builtins, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - a built-in class whose constructor wants other arguments
            return LearnerError(f"{name}: {message}")
    return LearnerError(message)


def decode(data: bytes, limit: int = MAX_REPLY_BYTES) -> Any:
    """The value `encode` encoded; CodecError for anything else (malformed, too large, too deep)."""
    if len(data) > limit + _HEADER.size:
        raise CodecError(f"reply larger than {limit} bytes")
    if len(data) < _HEADER.size:
        raise CodecError("reply shorter than its header")
    tree_length, blob_length = _HEADER.unpack_from(data)
    if _HEADER.size + tree_length + blob_length != len(data):
        raise CodecError("reply length does not match its header")
    if tree_length > MAX_TREE_BYTES:
        raise CodecError(f"reply structure of {tree_length} bytes, more than {MAX_TREE_BYTES}")
    view = memoryview(data)
    raw = bytes(view[_HEADER.size:_HEADER.size + tree_length])
    problem = tree_problem(raw)
    if problem:
        raise CodecError(f"reply past its limits: {problem}")
    try:
        tree = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CodecError(f"reply is not JSON: {error.__class__.__name__}") from None
    try:
        return _Decoder(view[_HEADER.size + tree_length:])(tree)
    except RecursionError:
        raise CodecError("reply nested too deeply") from None
    except (TypeError, ValueError, OverflowError, RuntimeError) as error:
        if isinstance(error, CodecError):
            raise
        raise CodecError(f"bad reply: {error.__class__.__name__}: {error}") from None


# ---------------------------------------------------------------------------
# Trusted -> learner: pickled arguments, shared setup objects by name
# ---------------------------------------------------------------------------

_BY_VALUE = (type(None), bool, int, float, complex, str, bytes)


class _CallPickler(pickle.Pickler):
    def __init__(self, file, shared: dict[int, str]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared

    def persistent_id(self, obj):
        if isinstance(obj, _BY_VALUE):
            return None
        name = self.shared.get(id(obj))
        return None if name is None else ("setup", name)


class _CallUnpickler(pickle.Unpickler):
    def __init__(self, file, namespace: dict, loaded: dict | None = None):
        super().__init__(file)
        self.namespace = namespace
        self.loaded = loaded if loaded is not None else {}

    def persistent_load(self, pid):
        kind, name = pid
        if kind != "setup" or name not in self.namespace:
            raise pickle.UnpicklingError(f"the setup cells defined no {name!r} in the learner's process")
        self.loaded[name] = self.namespace[name]
        return self.namespace[name]


def shared_names(namespace: dict) -> dict[int, str]:
    """`id -> name` of the setup namespace's objects that travel by name (not plain immutable values,
    modules or private names)."""
    import types

    return {id(value): name for name, value in namespace.items()
            if not name.startswith("_") and not isinstance(value, (*_BY_VALUE, types.ModuleType))}


def dump_call(payload: Any, shared: dict[int, str]) -> bytes:
    """Pickle `payload` for the learner's process, setup objects by name."""
    buffer = io.BytesIO()
    _CallPickler(buffer, shared).dump(payload)
    return buffer.getvalue()


def load_call(data: bytes, namespace: dict, loaded: dict | None = None) -> Any:
    """In the learner's process: the payload, setup objects taken from `namespace` by name (each recorded in
    `loaded`, name -> object, when given)."""
    return _CallUnpickler(io.BytesIO(data), namespace, loaded).load()
