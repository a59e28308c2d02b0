# %% hidden exercise=time_steps points=1 name=warmup_calls_are_never_timed
# hint: the first `warmup` calls are made but never timed; the timed steps are the ones after them, each read on its own.
device = SimulatedAsyncDevice([2.0, 1.5, 1.0, 0.04, 0.06, 0.05], launch_s=0.002)
durations = time_steps(device, 3, 3)
assert len(durations) == 3 and all(math.isclose(d, w, rel_tol=1e-9) for d, w in zip(durations, [0.04, 0.06, 0.05])), durations
assert int(device.launched) == 6, int(device.launched)
none_skipped = time_steps(SimulatedAsyncDevice([2.0, 1.5, 0.05], launch_s=0.002), 0, 3)
assert all(math.isclose(d, w, rel_tol=1e-9) for d, w in zip(none_skipped, [2.0, 1.5, 0.05])), none_skipped

# %% hidden exercise=time_steps points=1 name=every_clock_read_follows_a_synchronize
# hint: on an asynchronous device a step returns before its work is done; synchronise before reading the clock at the end of a step, or you time the launch only.
device = SimulatedAsyncDevice([0.3, 0.2, 0.25], launch_s=0.001)
durations = time_steps(device, 1, 4)
assert all(math.isclose(d, w, rel_tol=1e-9) for d, w in zip(durations, [0.2, 0.25, 0.25, 0.25])), durations
host_bound = time_steps(SimulatedAsyncDevice([0.001], launch_s=0.01), 0, 2)
assert all(math.isclose(d, 0.01, rel_tol=1e-9) for d in host_bound), "when the launch outlasts the work, a step takes the launch"
assert (int(device.syncs), int(device.clock_reads)) == (8, 8), (int(device.syncs), int(device.clock_reads))

# %% hidden exercise=time_steps points=1 name=the_first_timed_step_waits_for_the_warmup
# hint: the warm-up work may still be queued when warm-up ends; synchronise before the first start read too, or the first interval carries the warm-up's tail.
device = SimulatedAsyncDevice([5.0, 0.01, 0.02, 0.03], launch_s=0.001)
durations = time_steps(device, 1, 3)
assert math.isclose(durations[0], 0.01, rel_tol=1e-9), durations
assert all(math.isclose(d, w, rel_tol=1e-9) for d, w in zip(durations, [0.01, 0.02, 0.03])), durations

# %% hidden exercise=time_steps points=1 name=one_step_per_interval
# hint: time each step between its own two clock reads; a block of several steps divided by their number hides the spread between steps.
device = SimulatedAsyncDevice([0.1, 0.4, 0.2, 0.9], launch_s=0.001)
durations = time_steps(device, 0, 4)
assert all(math.isclose(d, w, rel_tol=1e-9) for d, w in zip(durations, [0.1, 0.4, 0.2, 0.9])), durations
assert isinstance(durations, list) and all(type(d) is float for d in durations), durations

# %% hidden exercise=time_steps points=1 name=counts_are_checked_before_any_call
# hint: warmup is an int >= 0 and repeats an int >= 1 (a bool is not an int); refuse a bad count before calling any method of the device.
valid = time_steps(SimulatedAsyncDevice([0.5, 0.07], launch_s=0.001), 1, 2)
assert all(math.isclose(d, 0.07, rel_tol=1e-9) for d in valid) and len(valid) == 2, valid
for warmup, repeats in ((True, 2), (-1, 2), (1.0, 2), ("1", 2), (None, 2), (1, False), (1, True), (1, 0), (1, -2),
                        (1, 2.0), (1, "2"), (1, None)):
    device = SimulatedAsyncDevice([0.5, 0.07], launch_s=0.001)
    try:
        time_steps(device, warmup, repeats)
    except ValueError:
        assert (int(device.launched), int(device.syncs), int(device.clock_reads)) == (0, 0, 0), (warmup, repeats)
        continue
    raise AssertionError(f"time_steps(device, {warmup!r}, {repeats!r}) must raise ValueError")

# %% hidden exercise=time_steps points=2 name=agrees_with_reference_on_generated_devices
# hint: any device, warm-up and repeat count, valid or not: the same durations (or the same ValueError) as the contract's procedure.
from tools.course.grader.clauses import each_of, is_bool

_bad_warmups = [True, False, -1, -7, 1.0, 2.5, "2", None, float("nan")]
_bad_repeats = [True, False, 0, -3, 3.0, "1", None, float("inf")]
_cases = ([("valid", n) for n in range(30)] + [("warmup", value) for value in _bad_warmups]
          + [("repeats", value) for value in _bad_repeats] + [("host_bound", n) for n in range(4)]
          + [("no_warmup", n) for n in range(4)] + [("longer_than_work", n) for n in range(4)])


def _device_case(case, rng):
    kind, value = case
    work = [rng.uniform(0.005, 1.5) for _ in range(rng.randint(1, 7))]
    launch = rng.uniform(1e-4, 4e-3)
    warmup, repeats = rng.randint(0, 4), rng.randint(1, 5)
    if kind == "warmup":
        warmup = value
    elif kind == "repeats":
        repeats = value
    elif kind == "host_bound":  # the launch outlasts the work: the host is the bottleneck
        launch = 2 * max(work)
    elif kind == "no_warmup":
        warmup = 0
    elif kind == "longer_than_work":
        warmup, repeats = len(work) + 1, rng.randint(2, 5)
    return SimulatedAsyncDevice(work, launch_s=launch), warmup, repeats


reference.agrees("time_steps", each_of(_cases, _device_case, variants=2), cases=2 * len(_cases), check_inputs=False,
                 clauses={
                     "a bool warmup": lambda device, warmup, repeats: is_bool(warmup),
                     "a bool repeats": lambda device, warmup, repeats: is_bool(repeats) and not is_bool(warmup),
                     "a negative warmup": lambda device, warmup, repeats: type(warmup) is int and warmup < 0,
                     "a float warmup": lambda device, warmup, repeats: type(warmup) is float,
                     "zero repeats": lambda device, warmup, repeats: type(repeats) is int and repeats == 0
                     and type(warmup) is int and warmup >= 0,
                     "a float repeats": lambda device, warmup, repeats: type(repeats) is float
                     and type(warmup) is int and warmup >= 0,
                     "a launch longer than the work": lambda device, warmup, repeats:
                     float(device.launch_s) > float(device.work_s.max()),
                     "no warm-up at all": lambda device, warmup, repeats: warmup == 0 and type(warmup) is int
                     and type(repeats) is int and repeats >= 1,
                     "more calls than work entries": lambda device, warmup, repeats: type(warmup) is int
                     and type(repeats) is int and warmup >= device.work_s.numel() and repeats >= 1,
                 })

# %% hidden exercise=step_time_report points=1 name=quartiles_interpolate_on_the_sorted_durations
# hint: sort first; the q-quantile sits at q * (n - 1) between two neighbours, interpolated linearly (an even count has no middle element).
mask = torch.ones((1, 4), dtype=torch.long)
report = step_time_report([0.9, 0.1, 0.5, 0.3, 0.7, 0.2], mask)
expected = {"median_s": 0.4, "p25_s": 0.225, "p75_s": 0.65, "min_s": 0.1, "max_s": 0.9, "repeats": 6}
for key, value in expected.items():
    assert math.isclose(report[key], value, rel_tol=1e-9), (key, report[key], value)
assert math.isclose(report["iqr_s"], 0.425, rel_tol=1e-9) and math.isclose(report["relative_iqr"], 1.0625, rel_tol=1e-9)
odd = step_time_report([3, 1, 2], mask)
assert odd["median_s"] == 2.0 and odd["p25_s"] == 1.5 and odd["p75_s"] == 2.5, odd

# %% hidden exercise=step_time_report points=1 name=an_outlier_does_not_move_the_median
# hint: the median is the middle of the sorted readings, not their mean: one slow outlier must not move it.
mask = torch.ones((2, 2), dtype=torch.long)
steady = step_time_report([0.1, 0.1, 0.1, 0.1, 0.1], mask)
outlier = step_time_report([0.1, 0.1, 5.0, 0.1, 0.1], mask)
assert steady["median_s"] == outlier["median_s"] == 0.1, (steady["median_s"], outlier["median_s"])
assert outlier["max_s"] == 5.0 and math.isclose(outlier["samples_per_s"], 20.0, rel_tol=1e-9), outlier

# %% hidden exercise=step_time_report points=1 name=throughput_counts_only_real_tokens
# hint: the real tokens are the 1s of the attention mask, wherever the padding sits (right or left); batch * seq counts the padding too.
right = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
left = torch.flip(right, dims=[1])
for mask in (right, left, right.bool(), right.to(torch.uint8)):
    report = step_time_report([0.5], mask)
    assert (report["real_tokens"], report["padded_tokens"], report["batch_size"]) == (12, 18, 3), (mask.dtype, report)
    assert math.isclose(report["real_tokens_per_s"], 24.0) and math.isclose(report["padded_tokens_per_s"], 36.0), report
    assert math.isclose(report["pad_share"], 1 / 3, rel_tol=1e-9) and math.isclose(report["samples_per_s"], 6.0), report

# %% hidden exercise=step_time_report points=1 name=returns_plain_python_numbers
# hint: counts are Python ints and every other number a Python float, never a tensor or a numpy number.
report = step_time_report([2, 4], torch.tensor([[True, True, False]]))
assert type(report["repeats"]) is int and type(report["real_tokens"]) is int and type(report["padded_tokens"]) is int
assert type(report["batch_size"]) is int and report["real_tokens"] == 2, report
for key in ("median_s", "p25_s", "p75_s", "iqr_s", "min_s", "max_s", "relative_iqr", "pad_share", "samples_per_s",
            "real_tokens_per_s", "padded_tokens_per_s"):
    assert type(report[key]) is float, (key, type(report[key]))
assert report["median_s"] == 3.0 and report["min_s"] == 2.0, report

# %% hidden exercise=step_time_report points=1 name=refuses_bad_durations_and_masks
# hint: check every duration (a bool, NaN, infinity, zero or a negative number is refused) and the mask (a 2-D tensor of 0s and 1s with at least one 1, not floats).
good_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
valid = step_time_report([0.2, 0.4], good_mask)  # the valid call every case below breaks in one place
assert math.isclose(valid["median_s"], 0.3) and valid["real_tokens"] == 3 and math.isclose(valid["real_tokens_per_s"], 10.0)
bad_calls = [([], good_mask), ((0.2, 0.4), good_mask), ([0.2, float("nan")], good_mask), ([float("inf"), 0.4], good_mask),
             ([0.2, 0.0], good_mask), ([-0.2, 0.4], good_mask), ([True, 0.4], good_mask), (["0.2", 0.4], good_mask),
             ([0.2, None], good_mask), ([0.2, 0.4], [[1, 1, 0], [1, 0, 0]]), ([0.2, 0.4], good_mask.float()),
             ([0.2, 0.4], torch.tensor([1, 1, 0])), ([0.2, 0.4], good_mask[None]), ([0.2, 0.4], torch.zeros((0, 3), dtype=torch.long)),
             ([0.2, 0.4], torch.tensor([[1, 2, 0]])), ([0.2, 0.4], torch.tensor([[1, -1, 0]])), ([0.2, 0.4], torch.zeros((2, 3), dtype=torch.long))]
for position, (durations, mask) in enumerate(bad_calls):
    try:
        step_time_report(durations, mask)
    except ValueError:
        continue
    raise AssertionError(f"bad call {position} must raise ValueError")

# %% hidden exercise=step_time_report points=2 name=agrees_with_reference_on_generated_reports
# hint: any durations and mask, valid or not: the same report (ints and floats) or the same ValueError as the contract says; the arguments must not change.
from tools.course.grader.clauses import each_of, is_bool, not_finite

_duration_defects = [("nan", float("nan")), ("inf", float("inf")), ("-inf", float("-inf")), ("zero", 0), ("zero", 0.0),
                     ("negative", -0.25), ("negative", -1e-12), ("bool", True), ("bool", False), ("str", "0.1"),
                     ("none", None)]
_mask_defects = ["float", "one_d", "three_d", "empty", "two", "minus_one", "all_zero", "list", "half"]
_cases = ([("valid", n) for n in range(30)] + [("duration", defect) for defect in _duration_defects]
          + [("mask", defect) for defect in _mask_defects] + [("not_a_list", n) for n in range(2)]
          + [("ints", n) for n in range(4)] + [("ties", n) for n in range(4)] + [("left_padded", n) for n in range(4)])


def _report_case(case, rng):
    kind, value = case
    durations = [rng.uniform(1e-4, 2.0) for _ in range(rng.randint(1, 9))]
    rows, width = rng.randint(1, 4), rng.randint(1, 6)
    lengths = [rng.randint(1, width) for _ in range(rows)]
    mask = torch.tensor([[1] * length + [0] * (width - length) for length in lengths],
                        dtype=rng.choice([torch.long, torch.int32, torch.uint8, torch.bool]))
    if kind == "duration":
        durations[rng.randrange(len(durations))] = value[1]
    elif kind == "ints":
        durations = [rng.randint(1, 5) for _ in range(rng.randint(1, 6))]
    elif kind == "ties":
        durations = [0.25] * rng.randint(2, 6)
    elif kind == "left_padded":
        mask = torch.flip(mask, dims=[1])
    elif kind == "not_a_list":
        durations = tuple(durations) if value == 0 else []
    elif kind == "mask":
        if value == "float":
            mask = mask.float()
        elif value == "one_d":
            mask = mask.reshape(-1)
        elif value == "three_d":
            mask = mask[None]
        elif value == "empty":
            mask = torch.zeros((0, width), dtype=torch.long)
        elif value in ("two", "minus_one"):
            mask = mask.long()
            mask[rng.randrange(rows), rng.randrange(width)] = 2 if value == "two" else -1
        elif value == "all_zero":
            mask = torch.zeros_like(mask)
        elif value == "list":
            mask = mask.tolist()
        elif value == "half":
            mask = mask.half()
    return durations, mask


def _durations_valid(durations):
    return isinstance(durations, list) and bool(durations) and all(
        not is_bool(d) and isinstance(d, (int, float)) and math.isfinite(d) and d > 0 for d in durations)


reference.agrees("step_time_report", each_of(_cases, _report_case, variants=2), cases=2 * len(_cases), clauses={
    "a NaN duration": lambda durations, mask: isinstance(durations, list)
    and any(isinstance(d, float) and math.isnan(d) for d in durations),
    "an infinite duration": lambda durations, mask: isinstance(durations, list)
    and any(isinstance(d, float) and math.isinf(d) for d in durations),
    "a zero duration": lambda durations, mask: isinstance(durations, list) and any(d == 0 and not is_bool(d) for d in durations),
    "a negative duration": lambda durations, mask: isinstance(durations, list)
    and any(not is_bool(d) and isinstance(d, (int, float)) and d < 0 for d in durations),
    "a bool duration": lambda durations, mask: isinstance(durations, list) and any(is_bool(d) for d in durations),
    "a duration that is not a number": lambda durations, mask: isinstance(durations, list)
    and any(d is None or isinstance(d, str) for d in durations),
    "durations as a tuple": lambda durations, mask: isinstance(durations, tuple),
    "no duration": lambda durations, mask: durations == [],
    "integer durations (valid)": lambda durations, mask: _durations_valid(durations) and all(type(d) is int for d in durations),
    "tied durations (valid)": lambda durations, mask: _durations_valid(durations) and len(set(durations)) == 1 and len(durations) > 1,
    "a float mask": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor) and mask.is_floating_point(),
    "a mask that is not 2-D": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor) and mask.dim() != 2,
    "an empty mask": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor) and mask.numel() == 0,
    "a mask value of 2": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor)
    and not mask.is_floating_point() and bool((mask == 2).any()),
    "a mask value of -1": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor)
    and mask.dtype != torch.bool and mask.dtype != torch.uint8 and bool((mask == -1).any()),
    "a mask without a real token": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor)
    and mask.dim() == 2 and mask.numel() > 0 and not mask.is_floating_point() and int(mask.sum()) == 0,
    "a mask that is a list": lambda durations, mask: _durations_valid(durations) and isinstance(mask, list),
    "a bool mask (valid)": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor)
    and mask.dtype == torch.bool and bool(mask.any()) and mask.dim() == 2,
    "a left-padded mask (valid)": lambda durations, mask: _durations_valid(durations) and isinstance(mask, torch.Tensor)
    and mask.dim() == 2 and not mask.is_floating_point() and bool((mask[:, 0] == 0).any()) and bool((mask[:, -1] == 1).all()),
})

# %% hidden exercise=phase_peaks points=1 name=peak_is_reset_to_the_current_total_at_each_phase_start
# hint: at a phase start the peak becomes what is allocated at that moment: not the highest total so far, and not 0.
events = [("phase", "forward"), ("alloc", 900), ("free", 700), ("phase", "backward"), ("alloc", 100), ("free", 250),
          ("phase", "optimizer"), ("alloc", 40), ("free", 40)]
rows = phase_peaks(events, initial_bytes=500)
assert [(r["phase"], r["start_bytes"], r["peak_bytes"], r["end_bytes"]) for r in rows] == [
    ("forward", 500, 1400, 700), ("backward", 700, 800, 550), ("optimizer", 550, 590, 550)], rows
assert [r["peak_above_start_bytes"] for r in rows] == [900, 100, 40], rows
shifted = phase_peaks(events[3:], initial_bytes=700)
assert [(r["phase"], r["start_bytes"], r["peak_bytes"]) for r in shifted] == [("backward", 700, 800), ("optimizer", 550, 590)], shifted

# %% hidden exercise=phase_peaks points=1 name=a_phase_that_only_frees_peaks_at_its_start
# hint: the phase's start is part of the phase: when a phase only releases memory, its peak is its start total.
rows = phase_peaks([("phase", "backward"), ("free", 300), ("free", 200)], initial_bytes=1000)
assert rows == [{"phase": "backward", "start_bytes": 1000, "peak_bytes": 1000, "end_bytes": 500,
                 "peak_above_start_bytes": 0}], rows
empty_phase = phase_peaks([("alloc", 8), ("phase", "idle")])
assert empty_phase == [{"phase": "idle", "start_bytes": 8, "peak_bytes": 8, "end_bytes": 8, "peak_above_start_bytes": 0}], empty_phase

# %% hidden exercise=phase_peaks points=1 name=events_before_the_first_phase_move_the_start
# hint: what was allocated before the first phase (initial_bytes and the events before the first phase event) is part of every later total.
rows = phase_peaks([("alloc", 4096), ("free", 96), ("alloc", 64), ("phase", "forward"), ("alloc", 10)], initial_bytes=7)
assert rows[0]["start_bytes"] == 4071 and rows[0]["peak_bytes"] == 4081 and rows[0]["end_bytes"] == 4081, rows
assert phase_peaks([("alloc", 5)], initial_bytes=3) == [] and phase_peaks([]) == []

# %% hidden exercise=phase_peaks points=1 name=a_repeated_phase_name_is_a_new_row
# hint: two training steps give forward, backward, forward, backward: one row per phase event, in order, never merged by name.
events = [("phase", "forward"), ("alloc", 30), ("phase", "backward"), ("free", 30), ("phase", "forward"), ("alloc", 50),
          ("phase", "backward"), ("free", 50)]
rows = phase_peaks(events)
assert [r["phase"] for r in rows] == ["forward", "backward", "forward", "backward"], rows
assert [r["peak_bytes"] for r in rows] == [30, 30, 50, 50] and [r["end_bytes"] for r in rows] == [30, 0, 50, 0], rows

# %% hidden exercise=phase_peaks points=1 name=refuses_bad_events_and_overdrafts
# hint: check every event (a pair; one of the three kinds; a non-empty name; bytes an int >= 1, not a bool) and initial_bytes, and never let the total drop below 0.
valid = phase_peaks([("phase", "a"), ["alloc", 3], ("free", 3)], initial_bytes=2)  # the valid call every case breaks once
assert valid == [{"phase": "a", "start_bytes": 2, "peak_bytes": 5, "end_bytes": 2, "peak_above_start_bytes": 3}], valid
bad_calls = [
    ([("phase", "a"), ("alloc", 3), ("free", 6)], 2), ([("phase", ""), ("alloc", 3), ("free", 3)], 2),
    ([("phase", 7), ("alloc", 3), ("free", 3)], 2), ([("phase", "a"), ("alloc", True), ("free", 3)], 2),
    ([("phase", "a"), ("alloc", 0), ("free", 3)], 2), ([("phase", "a"), ("alloc", -3), ("free", 3)], 2),
    ([("phase", "a"), ("alloc", 3.0), ("free", 3)], 2), ([("phase", "a"), ("grow", 3), ("free", 3)], 2),
    ([("phase", "a"), ("alloc", 3, 1), ("free", 3)], 2), ([("phase", "a"), "alloc", ("free", 3)], 2),
    ([("phase", "a"), ("alloc", 3), ("free", 3)], True), ([("phase", "a"), ("alloc", 3), ("free", 3)], -1),
    ([("phase", "a"), ("alloc", 3), ("free", 3)], 2.0), ((("phase", "a"), ("alloc", 3), ("free", 3)), 2),
    ([("phase", "a"), ("alloc", 3), ("free", 3), ("free", 3)], 2),
]
for position, (events, initial) in enumerate(bad_calls):
    try:
        phase_peaks(events, initial)
    except ValueError:
        continue
    raise AssertionError(f"bad call {position} must raise ValueError")

# %% hidden exercise=phase_peaks points=2 name=agrees_with_reference_on_generated_traces
# hint: any trace and initial total, valid or not: the same rows or the same ValueError as the contract says; the events must not change.
from tools.course.grader.clauses import each_of, is_bool

_event_defects = ["bool_bytes", "zero_bytes", "negative_bytes", "float_bytes", "nan_bytes", "empty_name", "int_name",
                  "unknown_kind", "triple", "bare_string", "overdraft"]
_initial_defects = [True, -1, 1.5, None, float("inf")]
_cases = ([("valid", n) for n in range(30)] + [("event", defect) for defect in _event_defects for _ in range(3)]
          + [("initial", value) for value in _initial_defects] + [("not_a_list", 0)]
          + [("exact_zero", n) for n in range(3)] + [("no_phase", n) for n in range(3)]
          + [("phases_in_a_row", n) for n in range(3)] + [("list_pairs", n) for n in range(3)])


def _trace(rng, length, total):
    events, names = [], ["forward", "backward", "optimizer", "eval"]
    for _ in range(length):
        roll = rng.random()
        if roll < 0.3:
            events.append(("phase", rng.choice(names)))
        elif roll < 0.65 or total == 0:
            amount = rng.randint(1, 5000)
            events.append(("alloc", amount))
            total += amount
        else:
            amount = rng.randint(1, total)
            events.append(("free", amount))
            total -= amount
    return events, total


def _trace_case(case, rng):
    kind, value = case
    initial = rng.choice([0, 0, rng.randint(1, 10_000)])
    events, total = _trace(rng, rng.randint(0, 14), initial)
    if kind == "valid" and rng.random() < 0.5:
        events.insert(rng.randint(0, len(events)), ("phase", "forward"))
    elif kind == "event":
        position = rng.randint(0, len(events))
        broken = {"bool_bytes": ("alloc", True), "zero_bytes": ("alloc", 0), "negative_bytes": ("free", -4),
                  "float_bytes": ("alloc", 64.0), "nan_bytes": ("free", float("nan")), "empty_name": ("phase", ""),
                  "int_name": ("phase", 3), "unknown_kind": ("resize", 8), "triple": ("alloc", 8, 8),
                  "bare_string": "phase", "overdraft": None}[value]
        if broken is None:  # a free one byte beyond the running total at that position
            running = initial
            for event in events[:position]:
                running += event[1] if event[0] == "alloc" else -event[1] if event[0] == "free" else 0
            broken = ("free", running + 1)
        events.insert(position, broken)
    elif kind == "initial":
        initial = value
    elif kind == "not_a_list":
        events = tuple(events)
    elif kind == "exact_zero":
        events += [("phase", "release"), ("free", total)] if total else [("phase", "release")]
    elif kind == "no_phase":
        events = [event for event in events if event[0] != "phase"]
    elif kind == "phases_in_a_row":
        position = rng.randint(0, len(events))
        events[position:position] = [("phase", "a"), ("phase", "b"), ("phase", "a")]
    elif kind == "list_pairs":
        events = [list(event) for event in events] + [["phase", "tail"]]
    return events, initial


def _pairs(events):
    return [event for event in events if isinstance(event, (list, tuple)) and len(event) == 2] if isinstance(events, list) else []


def _clean(events, initial):
    """A well-formed trace: only a free below zero could still be wrong with it."""
    return (isinstance(events, list) and type(initial) is int and initial >= 0
            and all(isinstance(e, (list, tuple)) and len(e) == 2 for e in events)
            and all((e[0] == "phase" and isinstance(e[1], str) and e[1]) or (e[0] in ("alloc", "free")
                    and type(e[1]) is int and e[1] >= 1) for e in events))


def _running(events, initial):
    total = initial
    for kind, value in events:
        if kind in ("alloc", "free"):
            total += value if kind == "alloc" else -value
            yield total


def _overdraws(events, initial):
    return any(total < 0 for total in _running(events, initial))


def _reaches_zero(events, initial):
    return any(total == 0 for total in _running(events, initial)) and any(e[0] == "free" for e in events)


reference.agrees("phase_peaks", each_of(_cases, _trace_case, variants=2), cases=2 * len(_cases), clauses={
    "a bool byte count": lambda events, initial: any(is_bool(e[1]) for e in _pairs(events)),
    "a zero byte count": lambda events, initial: any(e[0] in ("alloc", "free") and e[1] == 0 and not is_bool(e[1])
                                                     for e in _pairs(events)),
    "a negative byte count": lambda events, initial: any(e[0] in ("alloc", "free") and not is_bool(e[1])
                                                         and isinstance(e[1], int) and e[1] < 0 for e in _pairs(events)),
    "a float byte count": lambda events, initial: any(isinstance(e[1], float) for e in _pairs(events)),
    "an empty phase name": lambda events, initial: any(e == ("phase", "") for e in _pairs(events)),
    "a phase name that is not a str": lambda events, initial: any(e[0] == "phase" and not isinstance(e[1], str)
                                                                  for e in _pairs(events)),
    "an unknown kind": lambda events, initial: any(e[0] not in ("phase", "alloc", "free") for e in _pairs(events)),
    "an event that is not a pair": lambda events, initial: isinstance(events, list)
    and any(not isinstance(e, (list, tuple)) or len(e) != 2 for e in events),
    "a free below zero": lambda events, initial: _clean(events, initial) and _overdraws(events, initial),
    "a bool initial_bytes": lambda events, initial: is_bool(initial),
    "a bad initial_bytes": lambda events, initial: not is_bool(initial) and not (type(initial) is int and initial >= 0),
    "events as a tuple": lambda events, initial: isinstance(events, tuple),
    "a free that empties memory exactly (valid)": lambda events, initial: _clean(events, initial)
    and not _overdraws(events, initial) and _reaches_zero(events, initial),
    "no phase event (valid)": lambda events, initial: _clean(events, initial) and not _overdraws(events, initial)
    and not any(e[0] == "phase" for e in events),
    "two phases in a row (valid)": lambda events, initial: _clean(events, initial) and not _overdraws(events, initial)
    and any(a[0] == b[0] == "phase" for a, b in zip(events, events[1:])),
    "a phase as the last event (valid)": lambda events, initial: _clean(events, initial) and bool(events)
    and not _overdraws(events, initial) and events[-1][0] == "phase",
    "a phase event as the first event (valid)": lambda events, initial: _clean(events, initial) and bool(events)
    and not _overdraws(events, initial) and events[0][0] == "phase",
    "pairs written as lists (valid)": lambda events, initial: _clean(events, initial) and bool(events)
    and not _overdraws(events, initial) and all(isinstance(e, list) for e in events),
})
