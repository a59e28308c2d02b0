"""Chapter 50 (preference data and evaluation): the examples, figures and fixed check around its exercises.

The learner writes the three mechanisms (`validate_preference_pairs`, `split_by_prompt`,
`pairwise_win_rate`); nothing here implements them. `run_fixed_check` takes them as arguments, so the
notebook passes its own reference and a test passes the same functions. The fixed check builds a
delivered preference set from the course's arithmetic generator with planted defects, cleans and
splits it, and evaluates two assumed answer sources with a position-biased pairwise judge
(`tools.experiments.preference.judge`), once in one order and once in both. Every number is computed
from assumed inputs: no model, GPU or service is measured.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence

from tools.chapters.framework_checks import functions_ran_line
from tools.data.arithmetic import ArithmeticTask, generate_tasks
from tools.errors import ConfigError
from tools.experiments.preference.judge import PairwiseJudge, is_correct

CHAPTER_ID = "50"
RECORD_STAGE = "preference_protocol"
MEASUREMENT_NOTE = ("none: pure computation on assumed answers and a simulated judge; no model, GPU or service "
                    "was measured")

SETTINGS = {"eval_fraction": 0.25, "near_duplicate": 0.85, "confidence": 0.95}
"""The thresholds of the fixed check, passed by name to the exercises."""
TRAIN_TASK_SEED, TRAIN_TASKS_PER_OPERATION = 101, 6
EVAL_TASK_SEED, EVAL_TASKS_PER_OPERATION = 909, 75
ANSWER_ACCURACY = {"candidate": 0.50, "baseline": 0.75}
"""Assumed share of correct answers of the two answer sources of the evaluation (teaching inputs)."""
POSITION_BIAS = 0.4
"""Probability that the simulated judge names the first answer without reading either."""
FIXED_SEED = 7
EXERCISES = ("validate_preference_pairs", "split_by_prompt", "pairwise_win_rate")


def normalised(text: str) -> str:
    """The course's normalisation: NFKC, casefold, then runs of whitespace as one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def prompt_words(prompt: str) -> set[str]:
    """The word set of a prompt: `\\w+` runs of its normalised text."""
    return set(re.findall(r"\w+", normalised(prompt)))


def jaccard(first: str, second: str) -> float:
    """|A & B| / |A | B| of the two prompts' word sets (1.0 when both have no word)."""
    a, b = prompt_words(first), prompt_words(second)
    return len(a & b) / len(a | b) if a | b else 1.0


# ---------------------------------------------------------------------------
# Steps 1-3: examples and figures
# ---------------------------------------------------------------------------

def _pair(pair_id: str, prompt: str, chosen: str, rejected: str, *, rejected_prompt: str | None = None,
          tie: bool = False) -> dict:
    return {"id": pair_id, "chosen": {"prompt": prompt, "response": chosen},
            "rejected": {"prompt": prompt if rejected_prompt is None else rejected_prompt, "response": rejected},
            "tie": tie}


_ADD = "Compute 23 + 19. Reply with the integer result only."
_MUL = "Compute 56 * 3. Reply with the integer result only."
STEP1_PAIRS = [
    _pair("p1", _ADD, "42", "41"),
    _pair("p2", _ADD, "42", "4", rejected_prompt="Compute 23 - 19. Reply with the integer result only."),
    _pair("p3", _MUL, "168", "  "),
    _pair("p4", _MUL, "168", " 168\n"),
    _pair("p5", "compute 23 + 19.  Reply with the integer result only.", "４２", "41"),
    _pair("p6", _MUL, "168", "The answer is 168.", tie=True),
    _pair("p7", _MUL, "168", "The answer is 168.", tie=True),
    _pair("p8", _MUL, "168", "158"),
]
"""Step 1's delivered pairs: one clean pair per prompt, and the defects the chapter names."""


def pairs_table(pairs: Sequence[Mapping]) -> str:
    """The raw pairs as text, with the exact strings (repr) the data holds: one line per answer."""
    lines = []
    for pair in pairs:
        lines.append(f"{pair['id']}  tie={pair['tie']}")
        for side in ("chosen", "rejected"):
            answer = pair[side]
            lines.append(f"    {side:<9} prompt {answer['prompt']!r:<62} response {answer['response']!r}")
    return "\n".join(lines)


STEP2_PROMPTS = {
    "a": _ADD,
    "b": "compute 23+19 . reply with the integer result only",
    "c": "Please compute 23 + 19. Reply with the integer result only.",
    "d": "Compute 23 + 18. Reply with the integer result only.",
    "e": _MUL,
    "f": "What is 56 times 3? Reply with the integer result only.",
}
"""Step 2's prompts: a reformatting, a paraphrase, a different task sharing a number, and a rewording."""


def draw_prompt_similarity(prompts: Mapping[str, str], threshold: float):
    """Figure: the word-set Jaccard similarity of every two prompts, cells at or above `threshold` framed."""
    import matplotlib.pyplot as plt

    names = list(prompts)
    values = [[jaccard(prompts[row], prompts[column]) for column in names] for row in names]
    fig, ax = plt.subplots(figsize=(6.5, 5.2))
    image = ax.imshow(values, vmin=0, vmax=1, cmap="Blues")
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if value > 0.6 else "black")
            if i != j and value >= threshold:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="crimson", lw=2.5))
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(names)), names)
    ax.set_title(f"word-set Jaccard of the prompts (framed: >= {threshold})")
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


STEP3_VERDICTS = [
    # (what the verifier says, candidate shown first, candidate shown second)
    ("only the candidate is right", "first", "second"),
    ("only the candidate is right", "first", "second"),
    ("only the candidate is right", "first", "first"),
    ("only the baseline is right", "second", "first"),
    ("only the baseline is right", "first", "first"),
    ("only the baseline is right", "first", "first"),
    ("only the baseline is right", "second", "first"),
    ("both right", "first", "first"),
    ("both right", "tie", "tie"),
    ("both wrong", "first", "first"),
]
"""Step 3's ten comparisons of a position-biased judge, each judged in both orders."""


def draw_order_verdicts(rows: Sequence[tuple[str, str, str]] = STEP3_VERDICTS):
    """Figure: who the judge preferred in each order (left) and which answer won, read by identity (right)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    colours = {"first": "#6baed6", "second": "#fd8d3c", "tie": "#d9d9d9"}
    for column, (title, index) in enumerate((("candidate shown first", 1), ("candidate shown second", 2))):
        bottom = 0
        for verdict in ("first", "second", "tie"):
            count = sum(row[index] == verdict for row in rows)
            left.bar(column, count, bottom=bottom, color=colours[verdict], label=verdict if column == 0 else None)
            if count:
                left.text(column, bottom + count / 2, f"{verdict}: {count}", ha="center", va="center", fontsize=9)
            bottom += count
    left.set_xticks([0, 1], ["candidate shown first", "candidate shown second"])
    left.set_ylabel("comparisons")
    left.set_title("verdicts by position: 'first' dominates both orders")
    read = {"candidate": [0, 0], "baseline": [0, 0], "tie": [0, 0]}
    for _, first_order, second_order in rows:
        for column, verdict, candidate_slot in ((0, first_order, "first"), (1, second_order, "second")):
            winner = "tie" if verdict == "tie" else ("candidate" if verdict == candidate_slot else "baseline")
            read[winner][column] += 1
    bottom = [0, 0]
    for winner, colour in (("candidate", "#31a354"), ("baseline", "#756bb1"), ("tie", "#d9d9d9")):
        right.bar([0, 1], read[winner], bottom=bottom, color=colour, label=winner)
        bottom = [b + v for b, v in zip(bottom, read[winner])]
    right.set_xticks([0, 1], ["candidate shown first", "candidate shown second"])
    right.set_title("the same verdicts read as 'which answer won'")
    right.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def step3_judgements(rows: Sequence[tuple[str, str, str]] = STEP3_VERDICTS) -> list[dict]:
    """Step 3's rows in the shape `pairwise_win_rate` reads."""
    return [{"id": f"c{number}", "candidate_first": first, "candidate_second": second}
            for number, (_, first, second) in enumerate(rows, start=1)]


def draw_interval_widths(pairwise_win_rate: Callable, win_share: float = 0.6,
                         sizes: Sequence[int] = (10, 20, 40, 80, 160, 320, 640)):
    """Figure: the interval of a constant observed win share as the number of consistent verdicts grows,
    computed with the `pairwise_win_rate` it is given."""
    import matplotlib.pyplot as plt

    lows, highs, decisions = [], [], []
    for size in sizes:
        wins = round(win_share * size)
        judgements = [{"id": f"w{k}", "candidate_first": "first", "candidate_second": "second"} for k in range(wins)]
        judgements += [{"id": f"l{k}", "candidate_first": "second", "candidate_second": "first"}
                       for k in range(size - wins)]
        result = pairwise_win_rate(judgements)
        lows.append(result["interval"][0])
        highs.append(result["interval"][1])
        decisions.append(result["decision"])
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.fill_between(range(len(sizes)), lows, highs, color="#9ecae1", label="95% interval")
    ax.plot(range(len(sizes)), [win_share] * len(sizes), color="#08519c", marker="o", label="observed win rate")
    ax.axhline(0.5, color="crimson", ls="--", lw=1, label="0.5")
    for index, decision in enumerate(decisions):
        ax.text(index, highs[index] + 0.02, decision.replace("_", " "), ha="center", fontsize=8)
    ax.set_xticks(range(len(sizes)), [str(size) for size in sizes])
    ax.set_xlabel("consistent verdicts (wins + losses)")
    ax.set_ylim(0.2, 1.05)
    ax.set_title(f"the same observed win rate {win_share}: the decision waits for the interval")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Step 5: the delivered set, the evaluation and the fixed check
# ---------------------------------------------------------------------------

def _wrong(task: ArithmeticTask, rng: random.Random) -> str:
    return str(task.label + rng.choice((-10, -2, -1, 1, 2, 10)))


_FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")


def _paraphrase(task: ArithmeticTask) -> str:
    return "Please " + task.prompt[0].lower() + task.prompt[1:]


def delivered_pairs(seed: int = TRAIN_TASK_SEED) -> list[dict]:
    """The delivered preference set of Step 5: one pair per task of the training generator (a correct vs
    a wrong answer), four paraphrased prompts, and planted defects (two join errors, two empty answers,
    two answers equal after normalisation, three duplicates, two ties)."""
    tasks = generate_tasks(seed=seed, per_operation=TRAIN_TASKS_PER_OPERATION)
    rng = random.Random(seed)
    pairs = [_pair(f"t-{task.task_id}", task.prompt, str(task.label), _wrong(task, rng)) for task in tasks]
    first, second, third, fourth = tasks[0], tasks[7], tasks[13], tasks[20]
    pairs += [_pair(f"para-{task.task_id}", _paraphrase(task), str(task.label), _wrong(task, rng))
              for task in (tasks[2], tasks[9], tasks[15], tasks[22])]
    pairs += [
        _pair("join-1", first.prompt, str(first.label), _wrong(tasks[1], rng), rejected_prompt=tasks[1].prompt),
        _pair("join-2", third.prompt, str(third.label), _wrong(tasks[14], rng), rejected_prompt=tasks[14].prompt),
        _pair("empty-1", second.prompt, str(second.label), ""),
        _pair("empty-2", fourth.prompt, " \n", _wrong(fourth, rng)),
        _pair("same-1", first.prompt, str(first.label), f" {first.label} "),
        _pair("same-2", third.prompt, str(third.label), str(third.label).translate(_FULL_WIDTH)),
        dict(pairs[4], id="dup-1"),
        {**pairs[5], "id": "dup-2", "chosen": {**pairs[5]["chosen"], "prompt": pairs[5]["chosen"]["prompt"].upper()},
         "rejected": {**pairs[5]["rejected"], "prompt": pairs[5]["rejected"]["prompt"].upper()}},
        {**pairs[6], "id": "dup-3", "chosen": {**pairs[6]["chosen"], "response": f"  {pairs[6]['chosen']['response']}"}},
        _pair("tie-1", second.prompt, str(second.label), f"The answer is {second.label}.", tie=True),
        _pair("tie-2", fourth.prompt, str(fourth.label), f"{fourth.a} * {fourth.b} = {fourth.label}", tie=True),
    ]
    return pairs


def appended_pairs(kept: Sequence[Mapping]) -> list[dict]:
    """Step 5's second delivery: every kept pair again, its prompt prefixed with "Again: " (a near-duplicate
    whose normalised prompt sorts before the original, so it becomes its group's new key)."""
    return [{"id": f"again-{pair['id']}", "prompt": "Again: " + pair["prompt"], "chosen": pair["chosen"],
             "rejected": pair["rejected"]} for pair in kept]


def moved_prompts(before: Mapping, after: Mapping) -> dict:
    """Pair ids of a first split that sit on another side (or in neither) after a second split."""
    side_after = {pair_id: side for side in ("train", "eval", "held") for pair_id in after.get(side, [])}
    return {f"{side}_moved": [pair_id for pair_id in before[side] if side_after.get(pair_id) != side]
            for side in ("train", "eval")}


def appended_check(split_by_prompt: Callable, kept: Sequence[Mapping]) -> dict:
    """Split the kept pairs, then the kept pairs plus the second delivery twice: by the hash alone and with
    the first split's ledger; which first-split pairs changed sides each way."""
    arguments = {"eval_fraction": SETTINGS["eval_fraction"], "near_duplicate": SETTINGS["near_duplicate"]}
    first = split_by_prompt(kept, **arguments)
    grown = [*kept, *appended_pairs(kept)]
    by_hash = split_by_prompt(grown, **arguments)
    with_ledger = split_by_prompt(grown, **arguments, ledger=first["ledger"])
    return {"new_pairs": len(grown) - len(kept), "by_hash": moved_prompts(first, by_hash),
            "with_ledger": {**moved_prompts(first, with_ledger), "held": list(with_ledger["held"])},
            "ledger_entries": {"before": len(first["ledger"]), "after": len(with_ledger["ledger"])}}


def naive_split_by_id(pairs: Sequence[Mapping], eval_fraction: float) -> dict:
    """The split a hurried pipeline makes: each pair alone by the hash of its id (prompts ignored)."""
    train, held = [], []
    for pair in pairs:
        bucket = int(hashlib.sha256(pair["id"].encode("utf-8")).hexdigest()[:8], 16)
        (held if bucket < eval_fraction * 2 ** 32 else train).append(pair["id"])
    return {"train": train, "eval": held}


def leaked_eval_ids(pairs: Sequence[Mapping], split: Mapping, near_duplicate: float) -> list[str]:
    """Eval pair ids whose prompt equals or near-duplicates the prompt of a training pair."""
    prompts = {pair["id"]: pair["prompt"] for pair in pairs}
    return [held for held in split["eval"]
            if any(jaccard(prompts[held], prompts[train]) >= near_duplicate for train in split["train"])]


def evaluation_tasks(training_prompts: Sequence[str], near_duplicate: float) -> tuple[list[ArithmeticTask], int]:
    """The fixed evaluation pool (its own seed), minus any task whose prompt near-duplicates a training
    prompt; also returns how many were dropped."""
    pool = generate_tasks(seed=EVAL_TASK_SEED, per_operation=EVAL_TASKS_PER_OPERATION)
    kept = [task for task in pool
            if all(jaccard(task.prompt, prompt) < near_duplicate for prompt in training_prompts)]
    return kept, len(pool) - len(kept)


def simulated_answers(tasks: Sequence[ArithmeticTask], accuracy: float, seed: int) -> dict[str, str]:
    """An assumed answer source: each task answered correctly with probability `accuracy`, else a near miss."""
    rng = random.Random(seed)
    return {task.task_id: str(task.label) if rng.random() < accuracy else _wrong(task, rng) for task in tasks}


def judge_in_both_orders(tasks: Sequence[ArithmeticTask], candidate: Mapping[str, str], baseline: Mapping[str, str],
                         judge: PairwiseJudge) -> list[dict]:
    """One judgement per task in the shape `pairwise_win_rate` reads: the judge's verdict with the
    candidate shown first, and with the candidate shown second."""
    return [{"id": task.task_id,
             "candidate_first": judge.verdict(task, candidate[task.task_id], baseline[task.task_id]),
             "candidate_second": judge.verdict(task, baseline[task.task_id], candidate[task.task_id])}
            for task in tasks]


def as_if_one_order(judgements: Sequence[Mapping]) -> list[dict]:
    """What a one-order evaluation concludes: the candidate-first verdict, taken as if the other order agreed."""
    mirror = {"first": "second", "second": "first", "tie": "tie"}
    return [{"id": item["id"], "candidate_first": item["candidate_first"],
             "candidate_second": mirror[item["candidate_first"]]} for item in judgements]


def run_fixed_check(validate_preference_pairs: Callable, split_by_prompt: Callable, pairwise_win_rate: Callable,
                    *, seed: int = FIXED_SEED, position_bias: float = POSITION_BIAS) -> dict:
    """Step 5 with the three functions given: clean and split the delivered set, then evaluate the two
    answer sources with the biased judge in one order, in both orders, and with the unbiased verifier."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an int, got {seed!r}")
    delivered = delivered_pairs()
    report = validate_preference_pairs(delivered)
    kept = report["kept"]
    split = split_by_prompt(kept, eval_fraction=SETTINGS["eval_fraction"], near_duplicate=SETTINGS["near_duplicate"])
    naive = naive_split_by_id(kept, SETTINGS["eval_fraction"])
    tasks, dropped = evaluation_tasks([pair["prompt"] for pair in kept], SETTINGS["near_duplicate"])
    candidate = simulated_answers(tasks, ANSWER_ACCURACY["candidate"], seed)
    baseline = simulated_answers(tasks, ANSWER_ACCURACY["baseline"], seed + 1)
    biased = judge_in_both_orders(tasks, candidate, baseline, PairwiseJudge(position_bias, seed))
    verifier = judge_in_both_orders(tasks, candidate, baseline, PairwiseJudge(0.0, seed))
    confidence = SETTINGS["confidence"]
    return {
        "seed": seed, "position_bias": position_bias, "appended": appended_check(split_by_prompt, kept),
        "delivered": len(delivered), "issues": report["issues"], "counts": report["counts"],
        "duplicate_of": report["duplicate_of"], "kept": [pair["id"] for pair in kept],
        "split": {"train": split["train"], "eval": split["eval"], "groups": len(split["groups"])},
        "leaks": {"by_prompt": leaked_eval_ids(kept, split, SETTINGS["near_duplicate"]),
                  "by_id": leaked_eval_ids(kept, naive, SETTINGS["near_duplicate"])},
        "evaluation_tasks": len(tasks), "evaluation_dropped": dropped,
        "accuracy": {name: sum(is_correct(task, answers[task.task_id]) for task in tasks) / len(tasks)
                     for name, answers in (("candidate", candidate), ("baseline", baseline))},
        "one_order": _summary(pairwise_win_rate(as_if_one_order(biased), confidence=confidence)),
        "both_orders": _summary(pairwise_win_rate(biased, confidence=confidence)),
        "verifier": _summary(pairwise_win_rate(verifier, confidence=confidence)),
    }


def run_step5(mechanism, *, seed: int = FIXED_SEED, position_bias: float = POSITION_BIAS) -> dict:
    """Step 5 with the notebook's functions (`tools.chapters.mechanism.step5_mechanism`: the learner's where
    implemented, else the reference): the fixed check, and which functions ran (name, source, code sha256)."""
    missing = [name for name in EXERCISES if name not in mechanism.functions]
    if missing:
        raise ConfigError(f"Step 5 needs the chapter's functions {list(EXERCISES)}; missing {missing}")
    results = run_fixed_check(*(mechanism.functions[name] for name in EXERCISES), seed=seed,
                              position_bias=position_bias)
    return {**results, "functions": mechanism.describe({})}


def _summary(result: Mapping) -> dict:
    return {key: result[key] for key in ("counts", "consistent", "win_rate", "interval", "decision")}


def verdict_flipped(results: Mapping) -> bool:
    """True when the one-order and the both-orders protocols reach different decisions."""
    return results["one_order"]["decision"] != results["both_orders"]["decision"]


def appended_line(appended: Mapping) -> str:
    """The second delivery as text: which first-split pairs change sides by the hash alone and with the ledger."""
    by_hash, kept = appended["by_hash"], appended["with_ledger"]
    return (f"second delivery ({appended['new_pairs']} near-duplicate prompts that sort first): by the hash alone "
            f"{len(by_hash['train_moved'])} trained pairs leave train and {len(by_hash['eval_moved'])} evaluated pairs "
            f"leave eval; with the ledger {len(kept['train_moved'])} and {len(kept['eval_moved'])} "
            f"({len(kept['held'])} held)")


def summary_lines(results: Mapping) -> list[str]:
    """The fixed check as text: data issues, split, leaks, and the three evaluations."""
    counts = ", ".join(f"{code} {count}" for code, count in results["counts"].items())
    split, leaks, accuracy = results["split"], results["leaks"], results["accuracy"]
    lines = [functions_ran_line(results["functions"])] if "functions" in results else []
    lines += [
        f"delivered {results['delivered']} pairs -> kept {len(results['kept'])}; issues: {counts}",
        (f"split by prompt: {len(split['train'])} train / {len(split['eval'])} eval pairs in {split['groups']} "
         f"prompt groups; eval pairs with a near-duplicate prompt in train: by prompt {len(leaks['by_prompt'])}, "
         f"by pair id {len(leaks['by_id'])} {leaks['by_id']}"),
        appended_line(results["appended"]),
        (f"evaluation: {results['evaluation_tasks']} tasks ({results['evaluation_dropped']} dropped as "
         f"near-duplicates of training prompts); assumed answer accuracy candidate {accuracy['candidate']:.2f}, "
         f"baseline {accuracy['baseline']:.2f}"),
        f"{'protocol':<34}{'win':>5}{'loss':>6}{'tie':>5}{'incons.':>9}{'win rate':>10}  {'interval':<16}decision",
    ]
    for key, title in (("one_order", f"biased judge, one order (bias {results['position_bias']})"),
                       ("both_orders", "biased judge, both orders"), ("verifier", "verifier (no bias), both orders")):
        row = results[key]
        rate = "-" if row["win_rate"] is None else f"{row['win_rate']:.3f}"
        interval = "-" if row["interval"] is None else f"[{row['interval'][0]:.3f}, {row['interval'][1]:.3f}]"
        counts = row["counts"]
        lines.append(f"{title:<34}{counts['win']:>5}{counts['loss']:>6}{counts['tie']:>5}{counts['inconsistent']:>9}"
                     f"{rate:>10}  {interval:<16}{row['decision']}")
    lines.append(f"verdict flipped by judging both orders: {verdict_flipped(results)}")

    return lines


def draw_fixed_check(results: Mapping):
    """Figure: the three protocols' win rates with their intervals, and the data issues found."""
    import matplotlib.pyplot as plt

    fig, (issues_ax, rates_ax) = plt.subplots(1, 2, figsize=(12.5, 3.8), gridspec_kw={"width_ratios": [1, 1.3]})
    codes = list(results["counts"])
    issues_ax.barh(codes, [results["counts"][code] for code in codes], color="#fd8d3c")
    issues_ax.invert_yaxis()
    issues_ax.set_xlabel("pairs")
    issues_ax.set_title(f"{results['delivered']} delivered pairs: issues found ({len(results['kept'])} kept)")
    keys = ("one_order", "both_orders", "verifier")
    labels = ["biased judge\none order", "biased judge\nboth orders", "verifier\n(ground truth)"]
    colours = {"candidate_better": "#31a354", "baseline_better": "#756bb1", "undecided": "#969696"}
    for index, key in enumerate(keys):
        row = results[key]
        if row["win_rate"] is None:
            continue
        low, high = row["interval"]
        rates_ax.errorbar(index, row["win_rate"], yerr=[[row["win_rate"] - low], [high - row["win_rate"]]], fmt="o",
                          capsize=6, color=colours[row["decision"]], ms=8)
        rates_ax.text(index + 0.08, row["win_rate"], f"{row['win_rate']:.2f}\n{row['decision']}", fontsize=8,
                      va="center")
    rates_ax.axhline(0.5, color="crimson", ls="--", lw=1)
    rates_ax.set_xticks(range(3), labels)
    rates_ax.set_xlim(-0.5, 2.9)
    rates_ax.set_ylim(0, 1)
    rates_ax.set_ylabel("candidate win rate (consistent verdicts)")
    rates_ax.set_title("one order vs both orders, with 95% intervals")
    fig.tight_layout()
    return fig


def record_body(results: Mapping) -> dict:
    """The `preference_protocol` record's body (the header and runtime come from `save_record`)."""
    return {
        "measurement": MEASUREMENT_NOTE,
        "inputs": {"settings": dict(SETTINGS), "train_task_seed": TRAIN_TASK_SEED,
                   "train_tasks_per_operation": TRAIN_TASKS_PER_OPERATION, "eval_task_seed": EVAL_TASK_SEED,
                   "eval_tasks_per_operation": EVAL_TASKS_PER_OPERATION, "answer_accuracy": dict(ANSWER_ACCURACY),
                   "position_bias": results["position_bias"], "seed": results["seed"]},
        "results": dict(results), "mechanism": results.get("functions"),
        "decision": {"both_orders": results["both_orders"]["decision"],
                     "one_order": results["one_order"]["decision"], "verdict_flipped": verdict_flipped(results)},
        "registry_headline": (f"position bias {results['position_bias']}: one order says "
                              f"{results['one_order']['decision']}, both orders say "
                              f"{results['both_orders']['decision']}"),
    }


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a `preference_protocol` record (this run's or an earlier cpu_smoke one)."""
    return [f"evidence level {record.get('evidence_level')}: a computation on assumed answers, not a GPU measurement",
            *summary_lines(record["results"])]
