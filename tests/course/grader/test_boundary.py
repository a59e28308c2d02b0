"""The grading boundary in one process: a test calls the learner's function through a proxy, the call and its
result cross the same encoding as between two processes, and its in-place effects come back where the
contract declares them (anything else the call changes fails it)."""

from __future__ import annotations

import copy
import time

import pytest
import torch

from tools.course.grader import boundary
from tools.course.grader.boundary import (
    BoundaryError,
    Contract,
    InProcessChannel,
    InputsChanged,
    LearnerFunction,
    backward_through,
    learner_proxies,
    run_cell,
)
from tools.course.grader.codec import LearnerError, shared_names

LEARNER = '''
import torch

def append_and_total(values, table):
    values.append(len(values))
    table["total"] = sum(values)
    table.pop("drop", None)
    return sum(values)

def scale_(tensor, factor):
    tensor.mul_(factor)
    return None

def train_step(model, optimizer, batch):
    model.eval()
    optimizer.zero_grad()
    loss = model(batch).pow(2).mean()
    loss.backward()
    optimizer.step()
    model.weight.requires_grad_(False)
    return {"loss": loss.detach(), "steps": 1}

def nll(logits):
    return {"nll": torch.log_softmax(logits, -1)[..., 0].neg(), "count": logits.shape[0]}

def checked(x):
    if x < 0:
        raise ValueError("negative")
    if x == 0:
        raise KeyError("zero")
    return float(x)

def module_out():
    return torch.nn.Linear(2, 2)

def uses_setup(items):
    return items is SETUP_ITEMS, len(items)

def pure(values):
    return list(values)

def noisy(x):
    import sys
    print("learner says", x)
    print("a warning", file=sys.stderr)
    return x * 2

def grads_seen(model, tensor):
    return [float(p.grad.flatten()[0]) for p in model.parameters()] + [float(tensor.grad[0])]

def doubled(x):
    return x * 2, torch.is_grad_enabled()

def zero_and_sum(logits):
    total = logits.sum()
    logits.zero_()
    return total

def nll_and_scale(logits):
    logits.data.mul_(0)
    return nll(logits)

def overwrite_model(model, batch):
    model.weight.data.fill_(1.0)
    return float(model(batch).sum())
'''

CONTRACTS = {
    "append_and_total": Contract(("values", "table"), frozenset({"values", "table"})),
    "scale_": Contract(("tensor", "factor"), frozenset({"tensor"})),
    "train_step": Contract(("model", "optimizer", "batch"), frozenset({"model", "optimizer"})),
    "zero_and_sum": Contract(("logits",)),
    "nll_and_scale": Contract(("logits",)),
}


def learner_namespace() -> dict:
    """The learner's functions, defined here as the kernel's solution cells would define them."""
    namespace = {"__name__": "__main__"}
    exec(LEARNER, namespace)  # noqa: S102 - the test's own learner code
    return namespace


@pytest.fixture
def proxies():
    learner = learner_namespace()
    learner["SETUP_ITEMS"] = ["a", "b"]
    trusted = {"SETUP_ITEMS": ["a", "b"]}
    names = ["append_and_total", "scale_", "train_step", "nll", "checked", "module_out", "uses_setup", "pure",
             "grads_seen", "noisy", "doubled", "missing", "zero_and_sum", "nll_and_scale"]
    return learner_proxies(names, InProcessChannel(learner), shared_names(trusted), CONTRACTS), trusted


def test_results_cross_and_declared_in_place_effects_on_lists_and_dicts_come_back(proxies):
    functions, _ = proxies
    values, table = [1, 2], {"drop": 1, "keep": "x"}
    assert functions["append_and_total"](values, table) == 5
    assert values == [1, 2, 2] and table == {"keep": "x", "total": 5}


def test_tensors_modules_and_optimizers_are_updated_as_by_a_local_call(proxies):
    functions, _ = proxies
    tensor = torch.ones(3)
    assert functions["scale_"](tensor, 2.5) is None and torch.equal(tensor, torch.full((3,), 2.5))
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    twin = copy.deepcopy(model)
    twin_optimizer = torch.optim.Adam(twin.parameters(), lr=0.1)
    batch = torch.randn(4, 3)
    result = functions["train_step"](model, optimizer, batch)
    namespace = learner_namespace()
    expected = namespace["train_step"](twin, twin_optimizer, batch)
    assert torch.equal(result["loss"], expected["loss"]) and result["steps"] == 1
    for mine, theirs in zip(model.parameters(), twin.parameters()):
        assert torch.equal(mine, theirs) and torch.equal(mine.grad, theirs.grad)
        assert mine.requires_grad == theirs.requires_grad
    assert model.training is False and not model.weight.requires_grad
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"], twin_optimizer.state_dict()["state"][0]["exp_avg"])
    assert optimizer.param_groups[0]["params"][0] is model.weight  # the optimiser still drives the test's own model


def test_gradients_the_arguments_already_carry_reach_the_learners_side(proxies):
    """Pickling drops `.grad`; a function that reads or must keep the gradients it was given still sees them."""
    functions, _ = proxies
    model = torch.nn.Linear(2, 1)
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 7.0)
    tensor = torch.ones(2, requires_grad=True)
    tensor.grad = torch.full((2,), 3.0)
    assert functions["grads_seen"](model, tensor) == [7.0, 7.0, 3.0]
    assert all(bool((parameter.grad == 7.0).all()) for parameter in model.parameters())
    assert torch.equal(tensor.grad, torch.full((2,), 3.0))
    outcome = functions["grads_seen"].call_many([((model, tensor), {})])
    assert outcome == [("value", [7.0, 7.0, 3.0])]


def test_exceptions_keep_their_builtin_class_and_missing_functions_raise_name_error(proxies):
    functions, _ = proxies
    assert functions["checked"](2) == 2.0
    with pytest.raises(ValueError, match="negative"):
        functions["checked"](-1)
    with pytest.raises(KeyError):
        functions["checked"](0)
    with pytest.raises(NameError, match="missing"):
        functions["missing"]()


def test_only_plain_data_comes_back(proxies):
    functions, _ = proxies
    with pytest.raises(LearnerError, match="cannot cross"):
        functions["module_out"]()


SPOOFS = """
import torch

class AlwaysEqual(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__

class AlwaysEqualList(list):
    def __eq__(self, other):
        return True

class AlwaysTrueTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True

def spoof_float():
    return AlwaysEqual(1.0)

def spoof_nested():
    return {"loss": [AlwaysEqual(2.0)]}

def spoof_list():
    return AlwaysEqualList([1])

def spoof_tensor():
    return torch.zeros(3).as_subclass(AlwaysTrueTensor)

def spoof_through_an_argument(values):
    values.append(AlwaysEqual(3.0))
    return 1
"""


@pytest.mark.parametrize("name", ["spoof_float", "spoof_nested", "spoof_list", "spoof_tensor"])
def test_a_result_that_claims_to_equal_anything_never_reaches_the_test(name):
    learner = {"__name__": "__main__"}
    exec(SPOOFS, learner)  # noqa: S102 - the test's own hostile learner code
    function = learner_proxies([name], InProcessChannel(learner), shared_names({}))[name]
    with pytest.raises(LearnerError, match="cannot cross"):
        function()


@pytest.mark.parametrize("declared", [True, False])
def test_an_argument_filled_with_a_spoofing_object_is_not_mirrored_back(declared):
    learner = {"__name__": "__main__"}
    exec(SPOOFS, learner)  # noqa: S102 - the test's own hostile learner code
    contract = Contract(("values",), frozenset({"values"}) if declared else frozenset())
    function = learner_proxies(["spoof_through_an_argument"], InProcessChannel(learner), shared_names({}),
                               {"spoof_through_an_argument": contract})
    values = [0.0]
    with pytest.raises((BoundaryError, LearnerError), match="could not be applied|changed its inputs"):
        function["spoof_through_an_argument"](values)
    assert values == [0.0] and all(type(value) is float for value in values)


def test_an_undeclared_change_fails_the_call_and_never_reaches_the_tests_objects(proxies):
    """A wrong answer that also overwrites its input (`logits.zero_()`) cannot make a test that reads the
    input after the call agree with it: the call fails with a clear error and the test's tensor is untouched."""
    functions, _ = proxies
    logits = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(InputsChanged, match=r"zero_and_sum changed its inputs \(logits: tensor values"):
        functions["zero_and_sum"](logits)
    assert torch.equal(logits, torch.arange(6.0).reshape(2, 3))
    assert functions["zero_and_sum"](torch.zeros(2)) == torch.tensor(0.0)


def test_backward_through_brings_gradients_back_but_not_changed_values(proxies):
    functions, _ = proxies
    logits = torch.randn(2, 3, requires_grad=True)
    kept = logits.detach().clone()
    with pytest.raises(InputsChanged, match="logits"):
        backward_through(functions["nll_and_scale"], logits, select=["nll"])
    assert torch.equal(logits.detach(), kept)


def test_a_setup_object_the_call_changed_is_reported_by_name():
    """A setup object goes by name: the learner's function gets its own process's copy, so the learner's side
    says whether the call changed it."""
    learner = learner_namespace()
    learner["SETUP_MODEL"] = torch.nn.Linear(2, 1)
    trusted = {"SETUP_MODEL": torch.nn.Linear(2, 1)}
    kept = trusted["SETUP_MODEL"].weight.detach().clone()
    function = learner_proxies(["overwrite_model"], InProcessChannel(learner), shared_names(trusted),
                               {"overwrite_model": Contract(("model", "batch"))})["overwrite_model"]
    with pytest.raises(InputsChanged, match="the setup object 'SETUP_MODEL'"):
        function(trusted["SETUP_MODEL"], torch.ones(1, 2))
    assert torch.equal(trusted["SETUP_MODEL"].weight, kept)


def test_set_and_frozenset_arguments_cross_unchanged_and_a_changed_set_is_named(proxies):
    """A frozenset argument is no "different kind of value" (it was, while nbgrader passed the same test:
    found by project 84's `train_prompts`); a set the learner's side changed without declaring it is named."""
    functions, _ = proxies
    for members in (frozenset({"a", "b"}), {"a", "b"}, [frozenset({"x"}), {"y"}]):
        assert functions["pure"](members) == list(members)
    assert boundary.changed(frozenset({"a"}), boundary.state_of(frozenset({"a"}))) is None
    assert boundary.changed({"a"}, boundary.state_of({"a", "b"})) == "set members changed"
    assert boundary.rebuild(boundary.state_of(frozenset({"a"}))) == frozenset({"a"})
    assert type(boundary.rebuild(boundary.state_of(frozenset({"a"})))) is frozenset


def test_arguments_that_cannot_be_sent_are_a_clear_error(proxies):
    functions, _ = proxies
    with pytest.raises(BoundaryError, match="cannot be sent"):
        functions["pure"](lambda: 1)


def test_setup_objects_go_by_name_and_identity_is_never_preserved(proxies):
    functions, trusted = proxies
    assert functions["uses_setup"](trusted["SETUP_ITEMS"]) == (True, 2)
    assert functions["uses_setup"](list(trusted["SETUP_ITEMS"])) == (False, 2)
    values = [1]
    assert functions["pure"](values) == [1] and functions["pure"](values) is not values


def test_many_calls_in_one_round_trip_each_with_its_own_effects(proxies):
    functions, _ = proxies
    cases = [(([1], {}), {}), (([], {"drop": 0}), {})]
    outcomes = functions["append_and_total"].call_many(cases)
    assert outcomes == [("value", 2), ("value", 0)]
    assert cases[0][0] == ([1, 1], {"total": 2}) and cases[1][0] == ([0], {"total": 0})
    arguments = [((torch.ones(2),), {}), ((torch.zeros(2),), {})]
    changed = functions["zero_and_sum"].call_many(arguments)
    assert changed[0][0] == "raised" and isinstance(changed[0][1], InputsChanged)
    assert changed[1] == ("value", torch.tensor(0.0))  # zeroing zeros changes nothing
    assert torch.equal(arguments[0][0][0], torch.ones(2))
    raised = functions["checked"].call_many([((1,), {}), ((-1,), {})])
    assert raised[0] == ("value", 1.0) and raised[1][0] == "raised" and isinstance(raised[1][1], ValueError)


def test_gradients_through_the_learners_function_come_back_on_the_arguments(proxies):
    functions, _ = proxies
    logits = torch.randn(2, 3, requires_grad=True)
    local = logits.detach().clone().requires_grad_(True)
    namespace = learner_namespace()
    result = backward_through(functions["nll"], logits, select=["nll"])
    backward_through(namespace["nll"], local, select=["nll"])
    assert result["count"] == 2 and result["nll"].grad_fn is None
    assert logits.grad is not None and torch.allclose(logits.grad, local.grad)
    weights = torch.tensor([1.0, 0.0])
    logits.grad = None
    backward_through(functions["nll"], logits, select=["nll"], weights=weights)
    assert torch.count_nonzero(logits.grad[1]) == 0 and torch.count_nonzero(logits.grad[0]) > 0
    with pytest.raises(ValueError, match="reduce"):
        backward_through(functions["nll"], logits, reduce="max")
    logits.grad, local.grad = None, None
    backward_through(functions["nll"], logits, select=["nll"], reduce="square_sum")
    backward_through(namespace["nll"], local, select=["nll"], reduce="square_sum")
    assert torch.allclose(logits.grad, local.grad)


def test_a_call_runs_in_the_callers_grad_mode(proxies):
    functions, _ = proxies
    x = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        result, enabled = functions["doubled"](x)
    assert enabled is False and not result.requires_grad  # as a local call under no_grad
    result, enabled = functions["doubled"](x)
    assert enabled is True and result.requires_grad


def test_what_the_learners_function_prints_shows_with_the_tests_output(proxies):
    functions, _ = proxies
    outputs = run_cell("x = noisy(2)\nprint('test says', x)", {"noisy": functions["noisy"]})
    assert outputs == [{"output_type": "stream", "name": "stdout", "text": "learner says 2\ntest says 4\n"},
                       {"output_type": "stream", "name": "stderr", "text": "a warning\n"}]


def test_a_proxy_is_callable_and_named_like_the_function(proxies):
    functions, _ = proxies
    assert callable(functions["nll"]) and functions["nll"].__name__ == "nll"
    assert isinstance(functions["nll"], LearnerFunction)


def test_a_cell_reports_streams_errors_and_its_last_value_as_a_kernel_would():
    namespace = {"__name__": "__main__"}
    assert run_cell("x = 2\nprint('hi')\nx * 3", namespace) == [
        {"output_type": "stream", "name": "stdout", "text": "hi\n"},
        {"output_type": "execute_result", "data": {"text/plain": "6"}, "metadata": {}, "execution_count": None}]
    assert run_cell("x;", namespace) == [] and run_cell("None", namespace) == []
    outputs = run_cell("import sys\nprint('warn', file=sys.stderr)\nassert x == 3, 'x is 2'", namespace)
    assert outputs[0] == {"output_type": "stream", "name": "stderr", "text": "warn\n"}
    assert outputs[1]["output_type"] == "error" and outputs[1]["ename"] == "AssertionError"
    assert outputs[1]["evalue"] == "x is 2" and any("assert x == 3" in line for line in outputs[1]["traceback"])
    assert run_cell("def broken(:\n    pass", namespace)[0]["ename"] == "SyntaxError"
    assert run_cell("raise SystemExit(1)", namespace)[0]["ename"] == "SystemExit"


def test_a_cell_past_its_limit_is_stopped_even_inside_except_exception():
    source = "import time\ntry:\n    time.sleep(30)\nexcept Exception:\n    pass\nprint('swallowed')"
    started = time.monotonic()
    outputs = run_cell(source, {}, timeout_s=0.3)
    assert time.monotonic() - started < 20
    assert [output["output_type"] for output in outputs] == ["error"] and outputs[0]["ename"] == "CellTimeout"
