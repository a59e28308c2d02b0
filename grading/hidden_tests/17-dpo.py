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
base = sequence_logprobs(logits, ids, mask)
noisy = logits.clone()
noisy[0, 2:] = 100.0 * torch.randn(3, 4, generator=generator)
noisy[1, :2] = -50.0
noisy[:, -1] = 1e4
other_ids = ids.clone()
other_ids[0, 3:] = 2
other_ids[1, 0] = 0
assert torch.allclose(sequence_logprobs(noisy, other_ids, mask), base, atol=1e-6)

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

reference.agrees("sequence_logprobs", valid_batches(), cases=120)

# %% hidden exercise=sequence_logprobs points=2 name=agrees_with_reference_on_generated_invalid_batches
# hint: one thing wrong anywhere (a dtype, a shape, a mask value, an id out of range, position 0, an empty row): the same ValueError.
from hypothesis import strategies as st

defects = ["half_logits", "int_logits", "two_dim_logits", "short_time", "list_logits", "int32_ids", "float_ids",
           "ids_shape", "mask_shape", "float_mask", "mask_value", "negative_mask", "id_too_large", "negative_id",
           "position_zero", "empty_row", "list_mask", "empty_batch"]

@st.composite
def one_defect(draw):
    kind = draw(st.sampled_from(defects))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    logits = torch.randn(2, 4, 3, generator=generator)
    ids = torch.randint(0, 3, (2, 4), generator=generator)
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]])
    row = draw(st.integers(0, 1))
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
        mask[row, 2] = draw(st.sampled_from([2, 3, 7]))
    elif kind == "negative_mask":
        mask[row, 1] = -1
    elif kind == "id_too_large":
        ids[row, draw(st.integers(0, 3))] = draw(st.integers(3, 9))
    elif kind == "negative_id":
        ids[row, draw(st.integers(0, 3))] = -1
    elif kind == "position_zero":
        mask[row, 0] = 1
    elif kind == "empty_row":
        mask[row] = 0
    elif kind == "list_mask":
        mask = mask.tolist()
    else:
        logits, ids, mask = logits[:0], ids[:0], mask[:0]
    return logits, ids, mask

reference.agrees("sequence_logprobs", one_defect(), cases=120)

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

reference.agrees("dpo_loss", valid_pairs(), cases=120)

# %% hidden exercise=dpo_loss points=2 name=agrees_with_reference_on_generated_invalid_pairs
# hint: one thing wrong (a shape, a dtype, an empty or 2-D tensor, a NaN or infinity, a bool or non-positive beta): the same ValueError.
from hypothesis import strategies as st

@st.composite
def one_defect(draw):
    tensors = [torch.tensor([-1.0, -2.0, -0.5]) for _ in range(4)]
    beta = 0.1
    where = draw(st.integers(0, 3))
    kind = draw(st.sampled_from(["list", "shape", "dtype", "int", "half", "two_dim", "empty", "nan", "inf", "beta"]))
    if kind == "list":
        tensors[where] = tensors[where].tolist()
    elif kind == "shape":
        tensors[where] = tensors[where][:2]
    elif kind == "dtype":
        tensors[where] = tensors[where].double()
    elif kind == "int":
        tensors = [tensor.long() for tensor in tensors]
    elif kind == "half":
        tensors = [tensor.half() for tensor in tensors]
    elif kind == "two_dim":
        tensors = [tensor.reshape(1, 3) for tensor in tensors]
    elif kind == "empty":
        tensors = [tensor[:0] for tensor in tensors]
    elif kind == "nan":
        tensors[where][draw(st.integers(0, 2))] = float("nan")
    elif kind == "inf":
        tensors[where][draw(st.integers(0, 2))] = draw(st.sampled_from([float("inf"), float("-inf")]))
    else:
        beta = draw(st.sampled_from([0, 0.0, -0.1, True, False, None, "0.1", float("nan"), float("inf")]))
    return (*tensors, beta)

reference.agrees("dpo_loss", one_defect(), cases=120)

# %% hidden exercise=judge_beta_sweep points=2 name=agrees_with_reference_on_generated_valid_sweeps
# hint: any well-formed sweep (margins and drifts at the thresholds, ties, one or many responses): the same per-beta report, choice and decision.
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

reference.agrees("judge_beta_sweep", valid_sweeps(), cases=150)

# %% hidden exercise=judge_beta_sweep points=2 name=agrees_with_reference_on_generated_invalid_sweeps
# hint: one thing wrong anywhere (a key, a repeated or non-positive beta, a NaN margin, responses that do not pair up, a bool, a bad threshold): the same ValueError.
from hypothesis import strategies as st

defects = ([("sweep", bad) for bad in [None, [], (), "runs", {"beta": 0.1}]]
           + [("run", bad) for bad in [None, "run", [0.1, 1.0]]]
           + [("beta", bad) for bad in [0, -0.1, True, None, "0.1", float("nan"), float("inf")]] + [("dup_beta", None)]
           + [("margin", bad) for bad in [None, "1", True, float("nan"), float("-inf")]]
           + [("drop", key) for key in ["beta", "margin", "policy_logps", "reference_logps"]] + [("extra", "seed")]
           + [("responses", bad) for bad in [[], None, "x", [[]], [-1.0]]]
           + [("unpaired", None), ("short_token_list", None), ("token", True), ("token", float("nan")),
              ("token", "x"), ("token", None)]
           + [("max_kl", bad) for bad in [0, -1, True, None, float("nan"), float("inf")]]
           + [("min_margin", bad) for bad in [0, -0.5, False, "0.5", float("nan")]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    sweep = [{"beta": beta, "margin": 1.0, "policy_logps": [[-1.0, -0.5], [-2.0]],
              "reference_logps": [[-1.2, -0.5], [-1.0]]} for beta in (0.1, 0.3)]
    arguments = {"max_kl": 0.5, "min_margin": 0.5}
    where = draw(st.integers(0, 1))
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
        run[draw(st.sampled_from(["policy_logps", "reference_logps"]))] = bad
    elif kind == "unpaired":
        run["reference_logps"] = run["reference_logps"][:1]
    elif kind == "short_token_list":
        run["policy_logps"] = [[-1.0], [-2.0]]
    elif kind == "token":
        run[draw(st.sampled_from(["policy_logps", "reference_logps"]))][0][0] = bad
    else:
        arguments[kind] = bad
    return (sweep,), arguments

reference.agrees("judge_beta_sweep", one_defect(), cases=150)
