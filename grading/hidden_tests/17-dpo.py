# %% hidden exercise=sequence_logprobs points=1 name=shifted_gather_of_response_tokens
# hint: the token at position t is scored by log_softmax(logits[t - 1]); add those of the response tokens only.
generator = torch.Generator().manual_seed(11)
logits = torch.randn(3, 6, 5, generator=generator)
input_ids = torch.tensor([[4, 0, 1, 2, 3, 0], [1, 1, 1, 1, 1, 1], [0, 4, 3, 2, 1, 0]])
mask = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 0, 0]], dtype=torch.bool)
table = torch.log_softmax(logits, dim=-1)
expected = torch.tensor([sum(float(table[b, t - 1, input_ids[b, t]]) for t in range(1, 6) if mask[b, t])
                         for b in range(3)])
result = sequence_logprobs(logits, input_ids, mask)
assert result.shape == (3,) and result.dtype == torch.float32
assert torch.allclose(result, expected, atol=1e-5)

# %% hidden exercise=sequence_logprobs points=1 name=left_and_right_padding_give_the_same_value
# hint: where the padding stands must not matter: only the mask says which tokens are the response.
generator = torch.Generator().manual_seed(3)
row_logits = torch.randn(4, 6, dtype=torch.float64, generator=generator)
row_ids = torch.tensor([2, 5, 1, 3])
right_logits = torch.cat([row_logits, torch.zeros(2, 6, dtype=torch.float64)]).unsqueeze(0)
left_logits = torch.cat([torch.zeros(2, 6, dtype=torch.float64), row_logits]).unsqueeze(0)
right = sequence_logprobs(right_logits, torch.tensor([[2, 5, 1, 3, 0, 0]]), torch.tensor([[0, 0, 1, 1, 0, 0]]))
left = sequence_logprobs(left_logits, torch.tensor([[0, 0, 2, 5, 1, 3]]), torch.tensor([[0, 0, 0, 0, 1, 1]]))
assert torch.allclose(right, left, atol=1e-12) and right.dtype == torch.float64
table = torch.log_softmax(row_logits, dim=-1)
assert torch.allclose(right, (table[1, 1] + table[2, 3]).reshape(1), atol=1e-12)

# %% hidden exercise=sequence_logprobs points=1 name=masked_positions_change_nothing
# hint: logits at positions that do not predict a response token, and the ids of prompt and padding tokens, must not change the result.
generator = torch.Generator().manual_seed(5)
logits = torch.randn(2, 5, 4, generator=generator)
ids = torch.tensor([[1, 2, 3, 0, 0], [3, 3, 1, 2, 1]])
mask = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 0, 1, 1]])
table = torch.log_softmax(logits, dim=-1)
base = sequence_logprobs(logits, ids, mask)
noisy = logits.clone()
noisy[0, 2:] = 100.0 * torch.randn(3, 4, generator=generator)
noisy[1, :2] = -50.0
noisy[:, -1] = 1e4
other_ids = ids.clone()
other_ids[0, 3:] = 2
other_ids[1, 0] = 0
assert torch.allclose(sequence_logprobs(noisy, other_ids, mask), base, atol=1e-6)
assert torch.allclose(base, torch.stack([table[0, 0, 2] + table[0, 1, 3], table[1, 2, 2] + table[1, 3, 1]]), atol=1e-5)

# %% hidden exercise=sequence_logprobs points=1 name=a_sum_not_a_mean
# hint: a response of three tokens adds three log-probabilities; do not divide by the response length.
logits = torch.zeros(2, 5, 4)
ids = torch.tensor([[0, 1, 2, 3, 0], [0, 1, 2, 3, 0]])
result = sequence_logprobs(logits, ids, torch.tensor([[0, 1, 1, 1, 0], [0, 0, 0, 0, 1]]))
assert torch.allclose(result, torch.tensor([3 * -math.log(4), -math.log(4)]), atol=1e-6)

# %% hidden exercise=sequence_logprobs points=1 name=result_keeps_the_dtype_and_the_graph
# hint: float64 logits give a float64 result, and the result keeps its autograd graph (no detach, no .item()).
logits = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
result = sequence_logprobs(logits, torch.tensor([[0, 1, 2], [2, 1, 0]]), torch.tensor([[0, 1, 1], [0, 0, 1]]))
assert result.dtype == torch.float64 and result.shape == (2,) and result.requires_grad
frozen = sequence_logprobs(logits.detach().float(), torch.tensor([[0, 1, 2], [2, 1, 0]]),
                           torch.tensor([[0, 1, 1], [0, 0, 1]]))
assert frozen.dtype == torch.float32 and not frozen.requires_grad

# %% hidden exercise=sequence_logprobs points=1 name=gradient_reaches_only_positions_that_predict_a_response
# hint: the gradient of the result with respect to logits must be zero at every position that does not predict a response token.
from tools.course.grader.boundary import backward_through

logits = torch.randn(2, 5, 3, requires_grad=True)
mask = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 0, 0, 1]])
backward_through(sequence_logprobs, logits, torch.tensor([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0]]), mask, reduce="sum")
grad = logits.grad.abs().sum(dim=-1)
predicting = torch.tensor([[0, 1, 1, 0, 0], [1, 0, 0, 1, 0]], dtype=torch.bool)
assert bool((grad[~predicting] == 0).all()) and bool((grad[predicting] > 0).all())

# %% hidden exercise=sequence_logprobs points=1 name=invalid_batches_raise
# hint: check every tensor's type, dtype and shape, the mask's values, the token ids, position 0 and empty rows before computing.
logits = torch.randn(2, 4, 3)
ids = torch.tensor([[0, 1, 2, 1], [2, 2, 0, 1]])
mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]])
assert sequence_logprobs(logits, ids, mask).shape == (2,)
bad_calls = [
    lambda: sequence_logprobs(logits.half(), ids, mask), lambda: sequence_logprobs(logits.long(), ids, mask),
    lambda: sequence_logprobs(logits[0], ids, mask), lambda: sequence_logprobs(logits[:, :1], ids[:, :1], mask[:, :1]),
    lambda: sequence_logprobs(logits.tolist(), ids, mask), lambda: sequence_logprobs(logits, ids.int(), mask),
    lambda: sequence_logprobs(logits, ids.float(), mask), lambda: sequence_logprobs(logits, ids[:1], mask),
    lambda: sequence_logprobs(logits, ids, mask[:, :3]), lambda: sequence_logprobs(logits, ids, mask.float()),
    lambda: sequence_logprobs(logits, ids, mask * 2), lambda: sequence_logprobs(logits, ids, mask - 1),
    lambda: sequence_logprobs(logits, ids.clone().fill_(3), mask),
    lambda: sequence_logprobs(logits, ids - 1, mask),
    lambda: sequence_logprobs(logits, ids, torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1]])),
    lambda: sequence_logprobs(logits, ids, torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])),
    lambda: sequence_logprobs(logits, ids, mask.tolist()),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=dpo_loss points=1 name=loss_rewards_margins_and_accuracy_by_hand
# hint: h = (pc - rc) - (pr - rr); loss = mean(-logsigmoid(beta h)); rewards are beta times the log-ratios; accuracy is the share of margins > 0.
pc = torch.tensor([-4.0, -2.0, -3.0])
pr = torch.tensor([-5.0, -1.0, -3.5])
rc = torch.tensor([-4.5, -2.5, -2.0])
rr = torch.tensor([-5.0, -1.5, -3.0])
result = dpo_loss(pc, pr, rc, rr, 0.2)
assert torch.allclose(result["chosen_rewards"], torch.tensor([0.1, 0.1, -0.2]))
assert torch.allclose(result["rejected_rewards"], torch.tensor([0.0, 0.1, -0.1]))
assert torch.allclose(result["margins"], torch.tensor([0.1, 0.0, -0.1]), atol=1e-7)
expected = -torch.nn.functional.logsigmoid(torch.tensor([0.1, 0.0, -0.1])).mean()
assert torch.allclose(result["loss"], expected) and result["loss"].shape == ()
assert math.isclose(result["accuracy"], 1 / 3)

# %% hidden exercise=dpo_loss points=1 name=large_margins_stay_finite
# hint: use torch.nn.functional.logsigmoid: log(sigmoid(z)) becomes -inf once sigmoid(z) underflows to 0.
pc, pr = torch.tensor([0.0, -3000.0]), torch.tensor([-3000.0, 0.0])
zeros = torch.zeros(2)
result = dpo_loss(pc, pr, zeros, zeros, 1.0)
assert bool(torch.isfinite(result["loss"])) and math.isclose(float(result["loss"]), 1500.0, rel_tol=1e-6)
assert result["accuracy"] == 0.5

# %% hidden exercise=dpo_loss points=1 name=a_tie_is_not_a_correct_pair
# hint: a margin of exactly 0 is not > 0; at the start of training (policy = reference) the accuracy is 0 and the loss log 2.
same = torch.tensor([-2.0, -7.5, -1.0], dtype=torch.float64)
result = dpo_loss(same, same - 1.0, same, same - 1.0, 0.1)
assert result["accuracy"] == 0.0 and type(result["accuracy"]) is float
assert torch.allclose(result["loss"], torch.tensor(math.log(2), dtype=torch.float64))
assert torch.equal(result["margins"], torch.zeros(3, dtype=torch.float64))

# %% hidden exercise=dpo_loss points=1 name=statistics_are_detached_and_keep_the_dtype
# hint: rewards and margins are detached tensors of the inputs' dtype; the loss carries the policy's graph.
pc = torch.tensor([-1.0, -2.0], dtype=torch.float64, requires_grad=True)
pr = torch.tensor([-2.0, -1.0], dtype=torch.float64, requires_grad=True)
rc = torch.tensor([-1.5, -1.5], dtype=torch.float64, requires_grad=True)
rr = torch.tensor([-1.5, -1.5], dtype=torch.float64)
result = dpo_loss(pc, pr, rc, rr, 0.3)
for key in ("chosen_rewards", "rejected_rewards", "margins"):
    assert result[key].dtype == torch.float64 and result[key].shape == (2,) and not result[key].requires_grad, key
assert result["loss"].dtype == torch.float64 and result["loss"].requires_grad
assert pc.requires_grad and rc.requires_grad and not rr.requires_grad, "the inputs must not be changed"

# %% hidden exercise=dpo_loss points=1 name=reference_gradient_is_none_and_policy_gradient_is_the_logistic_weight
# hint: detach the reference log-probabilities; the gradient on policy_chosen is -beta * sigmoid(-beta h) / pairs, on policy_rejected its negative.
from tools.course.grader.boundary import backward_through

pc = torch.tensor([-1.0, -3.0, -2.0], requires_grad=True)
pr = torch.tensor([-2.0, -1.0, -2.0], requires_grad=True)
rc = torch.tensor([-1.2, -2.0, -2.5], requires_grad=True)
rr = torch.tensor([-1.8, -1.5, -2.0], requires_grad=True)
beta = 0.5
backward_through(dpo_loss, pc, pr, rc, rr, beta, select=["loss"], reduce=None)
h = (pc - rc - pr + rr).detach()
weight = -beta * torch.sigmoid(-beta * h) / 3
assert rc.grad is None and rr.grad is None, "no gradient may reach the reference"
assert torch.allclose(pc.grad, weight, atol=1e-6) and torch.allclose(pr.grad, -weight, atol=1e-6)

# %% hidden exercise=dpo_loss points=1 name=invalid_log_probabilities_and_beta_raise
# hint: four non-empty, finite, 1-D float tensors of one shape and dtype, and beta a finite number > 0 (bools refused).
a = torch.tensor([-1.0, -2.0])
assert dpo_loss(a, a - 1, a, a - 1, 0.1)["accuracy"] == 0.0
bad_calls = [
    lambda: dpo_loss(a.tolist(), a, a, a, 0.1), lambda: dpo_loss(a, a[:1], a, a, 0.1),
    lambda: dpo_loss(a, a, a.double(), a, 0.1), lambda: dpo_loss(a.long(), a.long(), a.long(), a.long(), 0.1),
    lambda: dpo_loss(a.reshape(1, 2), a.reshape(1, 2), a.reshape(1, 2), a.reshape(1, 2), 0.1),
    lambda: dpo_loss(a[:0], a[:0], a[:0], a[:0], 0.1), lambda: dpo_loss(a.half(), a.half(), a.half(), a.half(), 0.1),
    lambda: dpo_loss(a, a, a, torch.tensor([-1.0, float("nan")]), 0.1),
    lambda: dpo_loss(torch.tensor([float("-inf"), -1.0]), a, a, a, 0.1),
    lambda: dpo_loss(a, a, a, a, 0), lambda: dpo_loss(a, a, a, a, -0.1), lambda: dpo_loss(a, a, a, a, True),
    lambda: dpo_loss(a, a, a, a, float("inf")), lambda: dpo_loss(a, a, a, a, "0.1"),
    lambda: dpo_loss(a, a, a, a, torch.tensor(0.1)),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=judge_beta_sweep points=1 name=k3_is_averaged_over_every_token
# hint: pool the k3 terms of all tokens of all responses and take one mean (not a mean of per-response means); k3 = exp(d) - 1 - d with d = reference - policy.
long_response = [-1.0, -1.0, -1.0]
short_response = [-0.5]
run = {"beta": 0.1, "margin": 1.0, "policy_logps": [long_response, short_response],
       "reference_logps": [[-1.0, -1.0, -1.0], [-1.5]]}
result = judge_beta_sweep([run], max_kl=10.0, min_margin=0.1)
expected = (math.exp(-1.0) - 1 + 1.0) / 4
assert math.isclose(result["per_beta"][0]["kl"], expected, rel_tol=1e-12)
assert type(result["per_beta"][0]["kl"]) is float
swapped = dict(run, policy_logps=run["reference_logps"], reference_logps=run["policy_logps"])
assert math.isclose(judge_beta_sweep([swapped], 10.0, 0.1)["per_beta"][0]["kl"], (math.exp(1.0) - 1 - 1.0) / 4)

# %% hidden exercise=judge_beta_sweep points=1 name=both_gates_are_inclusive
# hint: a margin equal to min_margin and a kl equal to max_kl both pass; compare the values themselves.
run = {"beta": 0.2, "margin": 0.75, "policy_logps": [[-1.0]], "reference_logps": [[-1.0]]}
result = judge_beta_sweep([run], max_kl=0.5, min_margin=0.75)
assert result["per_beta"][0]["eligible"] and result["chosen_beta"] == 0.2
drift = math.exp(-0.5) - 1 + 0.5
edge = {"beta": 0.2, "margin": 1.0, "policy_logps": [[-1.0]], "reference_logps": [[-1.5]]}
assert judge_beta_sweep([edge], max_kl=drift, min_margin=0.5)["decision"] == "accept_mechanism"
assert judge_beta_sweep([edge], max_kl=drift * 0.999, min_margin=0.5)["decision"] == "tune"

# %% hidden exercise=judge_beta_sweep points=1 name=every_reason_in_order_and_beta_ascending
# hint: report every run by ascending beta with all of its reasons, margin_too_small before drift_too_large.
far = {"beta": 0.05, "margin": 0.1, "policy_logps": [[-0.1]], "reference_logps": [[-3.0]]}
near = {"beta": 1.0, "margin": 0.1, "policy_logps": [[-1.0]], "reference_logps": [[-1.0]]}
good = {"beta": 0.3, "margin": 2.0, "policy_logps": [[-1.0]], "reference_logps": [[-1.1]]}
result = judge_beta_sweep((near, far, good), max_kl=0.5, min_margin=0.5)
assert [entry["beta"] for entry in result["per_beta"]] == [0.05, 0.3, 1.0]
assert [entry["reasons"] for entry in result["per_beta"]] == [["margin_too_small", "drift_too_large"], [],
                                                               ["margin_too_small"]]
assert [entry["eligible"] for entry in result["per_beta"]] == [False, True, False]
assert [entry["margin"] for entry in result["per_beta"]] == [0.1, 2.0, 0.1]

# %% hidden exercise=judge_beta_sweep points=1 name=the_best_eligible_beta_and_its_tie_breaks
# hint: only eligible runs compete: the largest margin wins, then the smaller kl, then the smaller beta; a larger margin with too much drift never wins.
def run(beta, margin, reference_logp):
    return {"beta": beta, "margin": margin, "policy_logps": [[-1.0]], "reference_logps": [[reference_logp]]}

result = judge_beta_sweep([run(0.05, 9.0, -4.0), run(0.1, 2.0, -1.2), run(0.3, 2.0, -1.1)], max_kl=0.1, min_margin=0.5)
assert result["chosen_beta"] == 0.3, "equal margins: the smaller drift wins"
result = judge_beta_sweep([run(0.3, 2.0, -1.1), run(0.1, 2.0, -1.1)], max_kl=0.1, min_margin=0.5)
assert result["chosen_beta"] == 0.1, "equal margins and drift: the smaller beta wins"
result = judge_beta_sweep([run(0.1, 1.0, -1.0), run(0.2, 1.5, -1.05)], max_kl=0.1, min_margin=0.5)
assert result["chosen_beta"] == 0.2 and result["decision"] == "accept_mechanism"

# %% hidden exercise=judge_beta_sweep points=1 name=no_eligible_beta_means_tune
# hint: when no run passes both gates, chosen_beta is None and the decision is tune.
runs = [{"beta": 0.1, "margin": 5.0, "policy_logps": [[-0.1, -0.1]], "reference_logps": [[-2.0, -2.0]]},
        {"beta": 0.5, "margin": 0.01, "policy_logps": [[-1.0]], "reference_logps": [[-1.0]]}]
result = judge_beta_sweep(runs, max_kl=0.2, min_margin=0.5)
assert result["chosen_beta"] is None and result["decision"] == "tune"
assert not any(entry["eligible"] for entry in result["per_beta"])
assert judge_beta_sweep(runs, max_kl=5.0, min_margin=0.5)["chosen_beta"] == 0.1

# %% hidden exercise=judge_beta_sweep points=1 name=invalid_sweeps_raise
# hint: check the list, every run's keys, beta (positive, finite, unique), margin, the shapes of both log-probability lists and both thresholds before judging.
run = {"beta": 0.1, "margin": 1.0, "policy_logps": [[-1.0, -2.0]], "reference_logps": [[-1.0, -2.5]]}
assert judge_beta_sweep([run], 1.0, 0.5)["decision"] == "accept_mechanism"
bad_calls = [
    lambda: judge_beta_sweep([], 1.0, 0.5), lambda: judge_beta_sweep(None, 1.0, 0.5),
    lambda: judge_beta_sweep(run, 1.0, 0.5), lambda: judge_beta_sweep([run, dict(run)], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, beta=0)], 1.0, 0.5), lambda: judge_beta_sweep([dict(run, beta=True)], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, margin=float("nan"))], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, margin="1")], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, extra=1)], 1.0, 0.5),
    lambda: judge_beta_sweep([{k: v for k, v in run.items() if k != "margin"}], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, policy_logps=[])], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, policy_logps=[[]], reference_logps=[[]])], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, reference_logps=[[-1.0]])], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, reference_logps=[[-1.0, -2.0], [-1.0]])], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, policy_logps=[[-1.0, float("inf")]])], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, policy_logps=[[-1.0, True]])], 1.0, 0.5),
    lambda: judge_beta_sweep([dict(run, policy_logps=[-1.0, -2.0])], 1.0, 0.5),
    lambda: judge_beta_sweep([run], 0, 0.5), lambda: judge_beta_sweep([run], float("inf"), 0.5),
    lambda: judge_beta_sweep([run], 1.0, 0), lambda: judge_beta_sweep([run], 1.0, -1.0),
    lambda: judge_beta_sweep([run], True, 0.5),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=sequence_logprobs points=2 name=agrees_with_reference_on_generated_valid_batches
# hint: any well-formed batch (left or right padding, bool or integer masks, float32 or float64, a vocabulary of one): the same tensor.
from hypothesis import strategies as st

@st.composite
def valid_batches(draw):
    batch, time, vocab = draw(st.integers(1, 3)), draw(st.integers(2, 6)), draw(st.integers(1, 5))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    logits = (3 * torch.randn(batch, time, vocab, generator=generator)).to(dtype)
    ids = torch.randint(0, vocab, (batch, time), generator=generator)
    rows = []
    for _ in range(batch):
        row = [0] + [draw(st.integers(0, 1)) for _ in range(time - 1)]
        if not any(row):
            row[draw(st.integers(1, time - 1))] = 1
        rows.append(row)
    mask = torch.tensor(rows, dtype=draw(st.sampled_from([torch.bool, torch.int64, torch.int32, torch.uint8])))
    return logits, ids, mask

reference.agrees("sequence_logprobs", valid_batches(), cases=120, clauses={
    "float64 logits": lambda logits, ids, mask: logits.dtype == torch.float64,
    "float32 logits": lambda logits, ids, mask: logits.dtype == torch.float32,
    "a bool mask": lambda logits, ids, mask: mask.dtype == torch.bool,
    "an int64 mask": lambda logits, ids, mask: mask.dtype == torch.int64,
    "a narrower integer mask": lambda logits, ids, mask: mask.dtype in (torch.int32, torch.uint8),
    "a vocabulary of one": lambda logits, ids, mask: logits.shape[-1] == 1,
    "two positions only": lambda logits, ids, mask: logits.shape[1] == 2,
    "a response that ends the row (left padding)": lambda logits, ids, mask: bool(mask[:, -1].bool().any()),
    "a response followed by padding (right padding)": lambda logits, ids, mask: bool(
        (mask[:, :-1].bool() & ~mask[:, -1:].bool()).any()),
    "a mask with a gap inside the response": lambda logits, ids, mask: any(
        "101" in "".join(str(int(v)) for v in row) for row in mask),
    "a batch of more than one row": lambda logits, ids, mask: logits.shape[0] > 1,
})

# %% hidden exercise=sequence_logprobs points=2 name=agrees_with_reference_on_generated_invalid_batches
# hint: valid batches, or one thing wrong anywhere (a dtype, a shape, a mask value, an id out of range, position 0, an empty row): the same tensor, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([("valid", n) for n in range(24)]
           + [(kind, None) for kind in ["half_logits", "int_logits", "two_dim_logits", "short_time", "list_logits",
                                        "int32_ids", "float_ids", "ids_shape", "mask_shape", "float_mask", "mask_value",
                                        "negative_mask", "id_too_large", "negative_id", "position_zero", "empty_row",
                                        "list_mask", "empty_batch"]])

def one_defect(defect, rng):
    """A valid batch of two rows, or one with exactly this defect."""
    kind, _ = defect
    generator = torch.Generator().manual_seed(rng.randrange(1000))
    logits = torch.randn(2, 4, 3, generator=generator).to(rng.choice([torch.float32, torch.float64]))
    ids = torch.randint(0, 3, (2, 4), generator=generator)
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]]).to(rng.choice([torch.int64, torch.bool, torch.int32]))
    row = rng.randrange(2)
    if kind == "half_logits":
        logits = logits.half()
    elif kind == "int_logits":
        logits = logits.long()
    elif kind == "two_dim_logits":
        logits = logits[row]
    elif kind == "short_time":
        logits, ids, mask = logits[:, :1], ids[:, :1], mask[:, :1]
    elif kind == "list_logits":
        logits = logits.tolist()
    elif kind == "int32_ids":
        ids = ids.int()
    elif kind == "float_ids":
        ids = ids.float()
    elif kind == "ids_shape":
        ids = ids[:, :3]
    elif kind == "mask_shape":
        mask = mask[:1]
    elif kind == "float_mask":
        mask = mask.float()
    elif kind == "mask_value":
        mask = mask.long()
        mask[row, 2] = rng.choice([2, 3, 7])
    elif kind == "negative_mask":
        mask = mask.long()
        mask[row, 1] = -1
    elif kind == "id_too_large":
        ids[row, rng.randrange(4)] = rng.randint(3, 9)
    elif kind == "negative_id":
        ids[row, rng.randrange(4)] = -1
    elif kind == "position_zero":
        mask[row, 0] = 1
    elif kind == "empty_row":
        mask[row] = 0
    elif kind == "list_mask":
        mask = mask.tolist()
    elif kind == "empty_batch":
        logits, ids, mask = logits[:0], ids[:0], mask[:0]
    return logits, ids, mask


def tensor(value):
    return isinstance(value, torch.Tensor)


def good_logits(logits):
    return tensor(logits) and logits.dim() == 3 and logits.dtype in (torch.float32, torch.float64)


def shaped(logits, ids, mask):
    """Logits, ids and mask well formed in type and shape, with a batch and two positions."""
    return (good_logits(logits) and logits.shape[0] > 0 and logits.shape[1] >= 2 and tensor(ids)
            and ids.dtype == torch.int64 and tuple(ids.shape) == tuple(logits.shape[:2]) and tensor(mask)
            and tuple(mask.shape) == tuple(logits.shape[:2]) and not mask.is_floating_point())


reference.agrees("sequence_logprobs", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "logits that are not a tensor": lambda logits, ids, mask: not tensor(logits),
    "half-precision logits": lambda logits, ids, mask: tensor(logits) and logits.dtype == torch.float16,
    "integer logits": lambda logits, ids, mask: tensor(logits) and not logits.is_floating_point(),
    "logits that are not 3-D": lambda logits, ids, mask: tensor(logits) and logits.dim() != 3,
    "fewer than two positions": lambda logits, ids, mask: good_logits(logits) and logits.shape[1] < 2,
    "an empty batch": lambda logits, ids, mask: good_logits(logits) and logits.shape[0] == 0,
    "int32 input_ids": lambda logits, ids, mask: tensor(ids) and ids.dtype == torch.int32,
    "float input_ids": lambda logits, ids, mask: tensor(ids) and ids.is_floating_point(),
    "input_ids of another shape": lambda logits, ids, mask: good_logits(logits) and tensor(ids) and tuple(
        ids.shape) != tuple(logits.shape[:2]),
    "a mask of another shape": lambda logits, ids, mask: good_logits(logits) and tensor(mask) and tuple(
        mask.shape) != tuple(logits.shape[:2]),
    "a mask that is not a tensor": lambda logits, ids, mask: not tensor(mask),
    "a float mask": lambda logits, ids, mask: tensor(mask) and mask.is_floating_point(),
    "an integer mask value above 1": lambda logits, ids, mask: shaped(logits, ids, mask) and bool((mask > 1).any()),
    "a negative integer mask value": lambda logits, ids, mask: shaped(logits, ids, mask) and mask.dtype != torch.bool
        and bool((mask < 0).any()),
    "a token id at or above the vocabulary": lambda logits, ids, mask: shaped(logits, ids, mask) and bool(
        (ids >= logits.shape[-1]).any()),
    "a negative token id": lambda logits, ids, mask: shaped(logits, ids, mask) and bool((ids < 0).any()),
    "a response token at position 0": lambda logits, ids, mask: shaped(logits, ids, mask) and bool(
        mask[:, 0].bool().any()),
    "a row without a response token": lambda logits, ids, mask: shaped(logits, ids, mask) and not bool(
        mask.bool().any(dim=1).all()),
})

# %% hidden exercise=dpo_loss points=2 name=agrees_with_reference_on_generated_valid_pairs
# hint: any batch of finite log-probabilities and any positive beta (ties, huge margins, float64): the same loss, rewards, margins and accuracy.
from hypothesis import strategies as st

@st.composite
def valid_pairs(draw):
    pairs = draw(st.integers(1, 6))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    scale = draw(st.sampled_from([0.5, 5.0, 500.0]))
    tensors = [(-scale * torch.rand(pairs, generator=generator)).to(dtype) for _ in range(4)]
    if draw(st.booleans()):
        tensors[2], tensors[3] = tensors[0].clone(), tensors[1].clone()
    beta = draw(st.sampled_from([0.05, 0.1, 0.3, 1, 2.5]))
    return (*tensors, beta)


def margins(pc, pr, rc, rr, beta):
    return beta * ((pc - rc) - (pr - rr))


reference.agrees("dpo_loss", valid_pairs(), cases=120, clauses={
    "float64 log-probabilities": lambda pc, pr, rc, rr, beta: pc.dtype == torch.float64,
    "float32 log-probabilities": lambda pc, pr, rc, rr, beta: pc.dtype == torch.float32,
    "a single pair": lambda pc, pr, rc, rr, beta: pc.numel() == 1,
    "policy equal to the reference (every margin 0)": lambda pc, pr, rc, rr, beta: bool(
        (margins(pc, pr, rc, rr, beta) == 0).all()),
    "a negative margin": lambda pc, pr, rc, rr, beta: bool((margins(pc, pr, rc, rr, beta) < 0).any()),
    "a positive margin": lambda pc, pr, rc, rr, beta: bool((margins(pc, pr, rc, rr, beta) > 0).any()),
    "a margin large enough to overflow a naive log(sigmoid)": lambda pc, pr, rc, rr, beta: bool(
        (margins(pc, pr, rc, rr, beta).abs() > 100).any()),
    "beta given as an int": lambda pc, pr, rc, rr, beta: type(beta) is int,
})

# %% hidden exercise=dpo_loss points=2 name=agrees_with_reference_on_generated_invalid_pairs
# hint: valid pairs, or one thing wrong (a shape, a dtype, an empty or 2-D tensor, a NaN or infinity, a bool or non-positive beta): the same result, or the same ValueError.
from tools.course.grader.clauses import below, each_of, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(24)]
           + [(kind, None) for kind in ["list", "shape", "dtype", "int", "half", "two_dim", "empty", "nan", "inf"]]
           + [("beta", bad) for bad in [0, 0.0, -0.1, True, False, None, "0.1", float("nan"), float("inf")]])

def one_defect(defect, rng):
    """Three valid pairs, or with exactly this defect."""
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    tensors = [torch.tensor([-rng.uniform(0.1, 3) for _ in range(3)], dtype=dtype) for _ in range(4)]
    beta = rng.choice([0.1, 0.5, 1])
    where = rng.randrange(4)
    if kind == "list":
        tensors[where] = tensors[where].tolist()
    elif kind == "shape":
        tensors[where] = tensors[where][:2]
    elif kind == "dtype":
        tensors[where] = tensors[where].to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind == "int":
        tensors = [tensor.long() for tensor in tensors]
    elif kind == "half":
        tensors = [tensor.half() for tensor in tensors]
    elif kind == "two_dim":
        tensors = [tensor.reshape(1, 3) for tensor in tensors]
    elif kind == "empty":
        tensors = [tensor[:0] for tensor in tensors]
    elif kind == "nan":
        tensors[where][rng.randrange(3)] = float("nan")
    elif kind == "inf":
        tensors[where][rng.randrange(3)] = rng.choice([float("inf"), float("-inf")])
    elif kind == "beta":
        beta = bad
    return (*tensors, beta)


def four(args):
    return args[:4]


def all_tensors(*args):
    return all(isinstance(value, torch.Tensor) for value in four(args))


def well_formed(*args):
    """Four 1-D float tensors of one shape and dtype, none empty."""
    first = args[0]
    return all_tensors(*args) and all(value.dim() == 1 and value.numel() > 0 and value.shape == first.shape
                                      and value.dtype == first.dtype and value.dtype in (torch.float32, torch.float64)
                                      for value in four(args))


reference.agrees("dpo_loss", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "an input that is not a tensor": lambda *a: not all_tensors(*a),
    "shapes that differ": lambda *a: all_tensors(*a) and len({tuple(v.shape) for v in four(a)}) > 1,
    "dtypes that differ": lambda *a: all_tensors(*a) and len({tuple(v.shape) for v in four(a)}) == 1 and len(
        {v.dtype for v in four(a)}) > 1,
    "integer tensors": lambda *a: all_tensors(*a) and not a[0].is_floating_point(),
    "half-precision tensors": lambda *a: all_tensors(*a) and a[0].dtype == torch.float16,
    "2-D tensors": lambda *a: all_tensors(*a) and a[0].dim() == 2,
    "empty tensors": lambda *a: all_tensors(*a) and a[0].numel() == 0,
    "a NaN": lambda *a: well_formed(*a) and any(bool(v.isnan().any()) for v in four(a)),
    "an infinity": lambda *a: well_formed(*a) and any(bool(v.isinf().any()) for v in four(a)),
    "beta a bool": lambda *a: well_formed(*a) and is_bool(a[4]),
    "beta not a number": lambda *a: well_formed(*a) and not_a_number(a[4]),
    "beta <= 0": lambda *a: well_formed(*a) and not is_bool(a[4]) and below(a[4], 0, or_equal=True),
    "beta not finite": lambda *a: well_formed(*a) and not_finite(a[4]),
})

# %% hidden exercise=judge_beta_sweep points=2 name=agrees_with_reference_on_generated_valid_sweeps
# hint: any well-formed sweep (margins and drifts at the thresholds, ties, one or many responses): the same per-beta report, choice and decision.
import math as _math

from hypothesis import strategies as st

logp = st.sampled_from([-0.1, -0.5, -1.0, -1.5, -2.0, -3.0])

@st.composite
def valid_sweeps(draw):
    betas = draw(st.lists(st.sampled_from([0.05, 0.1, 0.3, 0.5, 1, 2.0]), min_size=1, max_size=4, unique=True))
    sweep = []
    for beta in betas:
        responses = draw(st.integers(1, 3))
        policy, reference_logps = [], []
        for _ in range(responses):
            length = draw(st.integers(1, 3))
            policy.append([draw(logp) for _ in range(length)])
            reference_logps.append([draw(logp) for _ in range(length)])
        sweep.append({"beta": beta, "margin": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0, 1.5])),
                      "policy_logps": policy, "reference_logps": reference_logps})
    return (sweep if draw(st.booleans()) else tuple(sweep), draw(st.sampled_from([0.05, 0.2, 0.5, 1, 2.0])),
            draw(st.sampled_from([0.5, 1, 1.0, 1.5])))


def k3(run):
    terms = [_math.exp(r - p) - 1 - (r - p) for mine, theirs in zip(run["policy_logps"], run["reference_logps"])
             for p, r in zip(mine, theirs)]
    return sum(terms) / len(terms)


def eligible(sweep, max_kl, min_margin):
    return [run for run in sweep if run["margin"] >= min_margin and k3(run) <= max_kl]


reference.agrees("judge_beta_sweep", valid_sweeps(), cases=150, clauses={
    "sweep is a tuple": lambda sweep, max_kl, min_margin: isinstance(sweep, tuple),
    "a single beta": lambda sweep, max_kl, min_margin: len(sweep) == 1,
    "betas not in ascending order": lambda sweep, max_kl, min_margin: [r["beta"] for r in sweep] != sorted(
        r["beta"] for r in sweep),
    "a margin exactly at min_margin": lambda sweep, max_kl, min_margin: any(r["margin"] == min_margin for r in sweep),
    "a margin below min_margin": lambda sweep, max_kl, min_margin: any(r["margin"] < min_margin for r in sweep),
    "a drift above max_kl": lambda sweep, max_kl, min_margin: any(k3(r) > max_kl for r in sweep),
    "both reasons on one beta": lambda sweep, max_kl, min_margin: any(
        k3(r) > max_kl and r["margin"] < min_margin for r in sweep),
    "no eligible beta (tune)": lambda sweep, max_kl, min_margin: not eligible(sweep, max_kl, min_margin),
    "eligible betas tied on margin": lambda sweep, max_kl, min_margin: len(
        [r["margin"] for r in eligible(sweep, max_kl, min_margin)]) > len(
        {r["margin"] for r in eligible(sweep, max_kl, min_margin)}),
    "several responses of different lengths": lambda sweep, max_kl, min_margin: any(
        len({len(tokens) for tokens in r["policy_logps"]}) > 1 for r in sweep),
    "a threshold given as an int": lambda sweep, max_kl, min_margin: type(max_kl) is int or type(min_margin) is int,
})

# %% hidden exercise=judge_beta_sweep points=2 name=agrees_with_reference_on_generated_invalid_sweeps
# hint: a valid sweep, or one thing wrong anywhere (a key, a repeated or non-positive beta, a NaN margin, responses that do not pair up, a bool, a bad threshold): the same report, or the same ValueError.
from tools.course.grader.clauses import below, dicts, each_of, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(30)]
           + [("sweep", bad) for bad in [None, [], (), "runs", {"beta": 0.1}]]
           + [("run", bad) for bad in [None, "run", [0.1, 1.0]]]
           + [("beta", bad) for bad in [0, -0.1, True, None, "0.1", float("nan"), float("inf")]] + [("dup_beta", None)]
           + [("margin", bad) for bad in [None, "1", True, float("nan"), float("-inf")]]
           + [("drop", key) for key in ["beta", "margin", "policy_logps", "reference_logps"]] + [("extra", "seed")]
           + [("responses", bad) for bad in [[], None, "x", [[]], [-1.0], [[], [-1.0]], [-1.0, [-2.0]]]]
           + [("unpaired", None), ("short_token_list", None), ("token", True), ("token", float("nan")),
              ("token", "x"), ("token", None)]
           + [("max_kl", bad) for bad in [0, -1, True, None, float("nan"), float("inf")]]
           + [("min_margin", bad) for bad in [0, -0.5, False, "0.5", float("nan")]])

def one_defect(defect, rng):
    """A valid sweep of two betas, or with exactly this defect."""
    kind, bad = defect
    sweep = [{"beta": beta, "margin": rng.choice([1.0, 0.2, 0.5]), "policy_logps": [[-1.0, -0.5], [-2.0]],
              "reference_logps": [[-1.2, rng.choice([-0.5, -3.0])], [-1.0]]} for beta in (0.1, 0.3)]
    arguments = {"max_kl": rng.choice([0.5, 1]), "min_margin": 0.5}
    where = rng.randrange(2)
    run = sweep[where]
    if kind == "sweep":
        sweep = bad
    elif kind == "run":
        sweep.insert(where, bad)
    elif kind in ("beta", "margin"):
        run[kind] = bad
    elif kind == "dup_beta":
        run["beta"] = sweep[1 - where]["beta"]
    elif kind == "drop":
        del run[bad]
    elif kind == "extra":
        run[bad] = 1
    elif kind == "responses":
        run[rng.choice(["policy_logps", "reference_logps"])] = bad
    elif kind == "unpaired":
        run["reference_logps"] = run["reference_logps"][:1]
    elif kind == "short_token_list":
        run["policy_logps"] = [[-1.0], [-2.0]]
    elif kind == "token":
        run[rng.choice(["policy_logps", "reference_logps"])][0][0] = bad
    elif kind != "valid":
        arguments[kind] = bad
    return (sweep,), arguments

RUN_KEYS = {"beta", "margin", "policy_logps", "reference_logps"}


def runs(sweep):
    return [run for run in dicts(sweep) if set(run) == RUN_KEYS]


def responses(sweep):
    return [(run["policy_logps"], run["reference_logps"]) for run in runs(sweep)]


def token_pairs(sweep):
    return [(mine, theirs) for policy, ref in responses(sweep)
            if isinstance(policy, (list, tuple)) and isinstance(ref, (list, tuple)) and len(policy) == len(ref)
            for mine, theirs in zip(policy, ref)]


def tokens(sweep):
    return [value for mine, theirs in token_pairs(sweep) if isinstance(mine, (list, tuple))
            and isinstance(theirs, (list, tuple)) and len(mine) == len(theirs) for value in [*mine, *theirs]]


def threshold_clauses(name):
    def value(sweep, max_kl, min_margin):
        return {"max_kl": max_kl, "min_margin": min_margin}[name]
    return {
        f"{name} a bool": lambda *a, **k: is_bool(value(*a, **k)),
        f"{name} not a number": lambda *a, **k: not_a_number(value(*a, **k)),
        f"{name} not finite": lambda *a, **k: not_finite(value(*a, **k)),
        f"{name} <= 0": lambda *a, **k: not is_bool(value(*a, **k)) and below(value(*a, **k), 0, or_equal=True),
    }


reference.agrees("judge_beta_sweep", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "sweep is not a list or tuple": lambda sweep, **k: not isinstance(sweep, (list, tuple)),
    "an empty sweep": lambda sweep, **k: isinstance(sweep, (list, tuple)) and not sweep,
    "a run that is not a dict": lambda sweep, **k: isinstance(sweep, (list, tuple)) and any(
        not isinstance(run, dict) for run in sweep),
    "a run without one of the four keys": lambda sweep, **k: any(RUN_KEYS - set(run) for run in dicts(sweep)),
    "a run with an extra key": lambda sweep, **k: any(set(run) - RUN_KEYS for run in dicts(sweep)),
    "a beta that is a bool": lambda sweep, **k: any(is_bool(run["beta"]) for run in runs(sweep)),
    "a beta that is not a number": lambda sweep, **k: any(not_a_number(run["beta"]) for run in runs(sweep)),
    "a beta <= 0": lambda sweep, **k: any(below(run["beta"], 0, or_equal=True) and not is_bool(run["beta"])
                                          for run in runs(sweep)),
    "a beta that is not finite": lambda sweep, **k: any(not_finite(run["beta"]) for run in runs(sweep)),
    "a repeated beta": lambda sweep, **k: len(runs(sweep)) == 2 and runs(sweep)[0]["beta"] == runs(sweep)[1]["beta"],
    "a margin that is a bool": lambda sweep, **k: any(is_bool(run["margin"]) for run in runs(sweep)),
    "a margin that is not a number": lambda sweep, **k: any(not_a_number(run["margin"]) for run in runs(sweep)),
    "a margin that is not finite": lambda sweep, **k: any(not_finite(run["margin"]) for run in runs(sweep)),
    "responses that are not a non-empty list": lambda sweep, **k: any(
        not isinstance(side, (list, tuple)) or not side for pair in responses(sweep) for side in pair),
    "response lists of different lengths": lambda sweep, **k: any(
        isinstance(p, (list, tuple)) and isinstance(r, (list, tuple)) and p and r and len(p) != len(r)
        for p, r in responses(sweep)),
    "a response that is not a list of tokens": lambda sweep, **k: any(
        not isinstance(mine, (list, tuple)) or not isinstance(theirs, (list, tuple)) for mine, theirs in token_pairs(sweep)),
    "an empty token list": lambda sweep, **k: any(
        isinstance(mine, (list, tuple)) and not mine for pair in token_pairs(sweep) for mine in pair),
    "token lists of different lengths": lambda sweep, **k: any(
        isinstance(mine, (list, tuple)) and isinstance(theirs, (list, tuple)) and len(mine) != len(theirs)
        for mine, theirs in token_pairs(sweep)),
    "a token log-probability that is a bool": lambda sweep, **k: any(is_bool(v) for v in tokens(sweep)),
    "a token log-probability that is not a number": lambda sweep, **k: any(not_a_number(v) for v in tokens(sweep)),
    "a token log-probability that is not finite": lambda sweep, **k: any(not_finite(v) for v in tokens(sweep)),
    **threshold_clauses("max_kl"), **threshold_clauses("min_margin"),
    "max_kl given as an int": lambda sweep, max_kl, min_margin: type(max_kl) is int and max_kl > 0,
})
