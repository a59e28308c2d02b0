"""`grading build` refuses a hidden test that compares a learner's result with an argument read after the call."""

from __future__ import annotations

import textwrap

import pytest

from tools.course.grader.reads_after import reads_after_call

LEARNER = {"sequence_logprobs": ("logits", "input_ids", "response_mask"), "step": ("model", "batch"),
           "nll": ("logits",)}


def findings(code: str, changes: dict | None = None) -> list[tuple[str, int]]:
    return [(finding.name, finding.read_line)
            for finding in reads_after_call(textwrap.dedent(code).strip("\n"), LEARNER, changes)]


def test_the_expected_value_read_from_the_argument_after_the_call_is_found():
    """Chapter 17's test before the fix: the table of log-probabilities came from `logits` after the call, so a
    wrong answer that zeroed `logits` in place agreed with it while the boundary mirrored every change."""
    assert findings("""
        logits = torch.randn(2, 5, 4)
        base = sequence_logprobs(logits, ids, mask)
        table = torch.log_softmax(logits, dim=-1)
        assert torch.allclose(base, table[0, 0, 2] + table[0, 1, 3])
    """) == [("table", 4)]
    assert findings("""
        logits = torch.randn(2, 5, 4)
        assert sequence_logprobs(logits, ids, mask) == manual(logits[0], ids)
    """) == [("logits", 2)]
    assert findings("""
        for case in cases:
            logits = torch.randn(2, 5, 4)
            out = sequence_logprobs(logits.view(2, 5, 4), ids, mask)
            expected = manual(logits)
            assert torch.allclose(out, expected)
    """) == [("expected", 5)]


@pytest.mark.parametrize("code", [
    # computed before the call
    """
    logits = torch.randn(2, 5, 4)
    table = torch.log_softmax(logits, dim=-1)
    base = sequence_logprobs(logits, ids, mask)
    assert torch.allclose(base, table[0, 0, 2])
    """,
    # the learner's function got a copy
    """
    logits = torch.randn(2, 5, 4)
    base = sequence_logprobs(logits.clone(), ids, mask)
    assert torch.allclose(base, torch.log_softmax(logits, dim=-1)[0, 0, 2])
    """,
    # the input is only checked to be unchanged, or reused to build the next case
    """
    batch = {"ids": torch.ones(2)}
    snapshot = copy.deepcopy(batch)
    out = step(model_a, batch)
    assert batch["ids"].equal(snapshot["ids"])
    bad = dict(batch, ids=None)
    with pytest.raises(ValueError):
        step(model_a, bad)
    """,
    # immutable literals, another item of the same list, an identity check, an assertion's message
    """
    names = ["a", "b", "c"]
    rate = 0.5
    out = step(names[1], rate)
    assert out["serving"] == names[2] and out["rate"] == rate * 2
    assert out is not names, names
    """,
    # a setup object (never bound here) and gradients after backward_through
    """
    logits = torch.randn(3, requires_grad=True)
    result = backward_through(nll, logits, select=["nll"])
    assert torch.allclose(logits.grad, result["grad"]) and result["n"] == TOKENIZER.vocab_size
    """,
])
def test_reads_that_cannot_see_what_the_learner_left_are_not_findings(code):
    assert findings(code) == []


def test_arguments_the_contract_lets_the_function_change_are_read_on_purpose():
    code = """
        model = Toy()
        out = step(model, batch)
        assert torch.allclose(model.weight.grad, out["expected_grad"])
    """
    assert findings(code) == [("model", 3)]
    assert findings(code, {"step": frozenset({"model"})}) == []
