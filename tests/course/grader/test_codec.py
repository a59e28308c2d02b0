"""The grading boundary's safe encoding: exact plain data and tensors come back, nothing else is decoded."""

from __future__ import annotations

import json
import math
import pickle
import struct

import pytest
import torch

from tools.course.grader.codec import (
    MAX_TREE_BYTES,
    MAX_TREE_NODES,
    CodecError,
    LearnerError,
    Unencodable,
    decode,
    dump_call,
    encode,
    exception_record,
    load_call,
    rebuild_exception,
    shared_names,
)


def roundtrip(value):
    return decode(encode(value))


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2 ** 100, 1.5, -0.0, float("inf"), "text ✓", b"\x00\xff",
    [1, 2.0, "3"], (1, (2, [3])), {"b": 1, "a": [2], 3: None, (1, "x"): 4.0}, {1, 2}, frozenset({"a"}),
    torch.Size([2, 3]), torch.float64, torch.bfloat16,
])
def test_plain_values_come_back_equal_and_of_the_same_type(value):
    back = roundtrip(value)
    assert type(back) is type(value) and back == value
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)
    if isinstance(value, dict):
        assert list(back) == list(value)


def test_nan_comes_back_as_nan():
    assert math.isnan(roundtrip(float("nan")))


@pytest.mark.parametrize("tensor", [
    torch.arange(6, dtype=torch.float32).reshape(2, 3),
    torch.tensor(3.5, dtype=torch.float64),
    torch.tensor([[True, False]]),
    torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    torch.tensor([1 + 2j], dtype=torch.complex64),
    torch.empty(0, 4, dtype=torch.int64),
    torch.arange(12).reshape(3, 4).t(),  # not contiguous
    torch.randn(1, 1, 3, dtype=torch.float64)[:, :, 0],  # "contiguous", but one element with its parent's stride
    torch.arange(6, dtype=torch.int32).reshape(2, 3)[:, 1:2],
])
def test_tensors_keep_values_dtype_and_shape(tensor):
    back = roundtrip(tensor)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor)


def test_requires_grad_and_parameters_cross_but_not_the_graph():
    leaf = torch.ones(2, requires_grad=True)
    result = (leaf * 2).sum()
    back = roundtrip({"loss": result, "weight": torch.nn.Parameter(torch.zeros(2))})
    assert back["loss"].requires_grad and back["loss"].grad_fn is None and back["loss"].item() == 4.0
    assert isinstance(back["weight"], torch.nn.Parameter) and back["weight"].requires_grad


@pytest.mark.parametrize("value", [
    torch.nn.Linear(2, 2), (x for x in range(3)), object(), type("Custom", (), {})(), math.pi.__class__,
    torch.ones(2).to_sparse(),
])
def test_objects_the_boundary_does_not_carry_are_refused_when_encoded(value):
    with pytest.raises(Unencodable):
        encode(value)


def test_a_reply_is_capped_in_bytes():
    with pytest.raises(Unencodable, match="more than"):
        encode(b"x" * 2000, limit=1000)
    with pytest.raises(CodecError, match="larger than"):
        decode(encode(b"x" * 2000), limit=1000)


def _reply(tree, blob=b"") -> bytes:
    text = json.dumps(tree).encode()
    return struct.pack(">QQ", len(text), len(blob)) + text + blob


@pytest.mark.parametrize("payload", [
    pickle.dumps({"a": 1}),  # a pickle is never unpickled
    b"",
    _reply({"tensor": {"dtype": "float32", "shape": [10 ** 9, 10 ** 9], "requires_grad": False, "data": [0, 4]}},
           b"\x00" * 4),  # claims more elements than it carries
    _reply({"tensor": {"dtype": "__class__", "shape": [1], "data": [0, 1]}}, b"\x00"),
    _reply({"dtype": "Tensor"}),
    _reply({"bytes": [0, 100]}, b"short"),
    _reply({"object": "os.system"}),
    _reply({"list": [{"list": []}] * 2}) + b"trailing",
    _reply(json.loads("[" * 50 + "]" * 50)),
])
def test_anything_but_a_valid_encoding_is_refused(payload):
    with pytest.raises(CodecError):
        decode(payload)


def test_the_structure_of_a_reply_is_bounded_far_below_its_tensor_bytes():
    """A reply's JSON part is parsed into Python objects: it is counted (bytes and containers) before parsing,
    both when the learner's side encodes it and when the trusted side receives it; tensor bytes are not."""
    assert MAX_TREE_BYTES * 8 <= 64 * 2 ** 20
    many = list(range(MAX_TREE_NODES))
    with pytest.raises(Unencodable, match="nested values"):
        encode(many)
    tree = {"list": [{"int": "1"}] * (MAX_TREE_NODES + 1)}
    with pytest.raises(CodecError, match="nested values"):
        decode(_reply(tree))
    with pytest.raises(CodecError, match="structure of"):
        decode(_reply({"list": ["x" * (MAX_TREE_BYTES + 1)]}))
    big = torch.zeros(4 * 2 ** 20, dtype=torch.float32)  # 16 MiB of tensor bytes still cross
    assert torch.equal(roundtrip(big), big)
    assert roundtrip(list(range(1000))) == list(range(1000))


def test_deep_nesting_is_refused_both_ways():
    nested = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(Unencodable):
        encode(nested)
    tree = {"list": []}
    for _ in range(200):
        tree = {"list": [tree]}
    with pytest.raises(CodecError):
        decode(_reply(tree))


def test_exceptions_come_back_as_the_nearest_builtin_class_or_a_generic_error():
    class Custom(ValueError):
        pass

    class Own(Exception):
        pass

    assert type(rebuild_exception(exception_record(Custom("bad"))["exception"])) is ValueError
    assert type(rebuild_exception(exception_record(KeyError("k"))["exception"])) is KeyError
    for error in (Own("x"), SystemExit(3)):
        rebuilt = rebuild_exception(exception_record(error)["exception"])
        assert type(rebuilt) is LearnerError and type(error).__name__ in str(rebuilt)
    rebuilt = roundtrip(TypeError("t" * 10_000))
    assert type(rebuilt) is TypeError and len(str(rebuilt)) <= 2000


def test_setup_objects_travel_by_name_and_plain_values_by_value():
    trusted = {"TOKENS": ["a", "b"], "LIMIT": 3, "math": math}
    learner = {"TOKENS": ["the learner's own"], "LIMIT": 99}
    shared = shared_names(trusted)
    assert set(shared.values()) == {"TOKENS"}
    sent = load_call(dump_call({"args": (trusted["TOKENS"], trusted["LIMIT"], [1])}, shared), learner)
    assert sent["args"][0] is learner["TOKENS"] and sent["args"][1:] == (3, [1])
    with pytest.raises(pickle.UnpicklingError, match="TOKENS"):
        load_call(dump_call(trusted["TOKENS"], shared), {})
