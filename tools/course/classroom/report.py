"""One page per chapter for the instructor: where the class struggles.

From the graded outcomes of a batch: the score distribution, each exercise's pass rate (full
marks on every test of the exercise) and mean score, the tests the class fails most often, the
hardest exercise (lowest pass rate; ties broken by lower mean score, then notebook order) and
the submissions that could not be graded. Written as markdown with a matplotlib PNG.
"""

from __future__ import annotations

from pathlib import Path

TOP_FAILING_TESTS = 10


def score_summary(outcomes: list) -> dict:
    """Counts, mean/median/min/max and a five-bin distribution of the graded scores."""
    graded = [outcome for outcome in outcomes if outcome.status == "graded"]
    scores = sorted(outcome.score for outcome in graded)
    max_score = graded[0].max_score if graded else None
    bins = [0] * 5
    for score in scores:
        bins[min(int(5 * score / max_score), 4) if max_score else 0] += 1
    middle = len(scores) // 2
    return {
        "submissions": len(outcomes),
        "graded": len(graded),
        "not_graded": len(outcomes) - len(graded),
        "graded_again_alone": sum(1 for outcome in outcomes if getattr(outcome, "regraded", None)),
        "max_score": max_score,
        "mean": round(sum(scores) / len(scores), 3) if scores else None,
        "median": (scores[middle] if len(scores) % 2 else (scores[middle - 1] + scores[middle]) / 2) if scores else None,
        "min": scores[0] if scores else None,
        "max": scores[-1] if scores else None,
        "full_marks": sum(1 for score in scores if max_score and score >= max_score),
        "distribution": {f"{20 * i}-{20 * (i + 1)}%": count for i, count in enumerate(bins)},
    }


def exercise_statistics(outcomes: list, exercises: list[str]) -> list[dict]:
    """Per exercise, over graded submissions: pass rate and mean fraction of its points."""
    graded = [outcome for outcome in outcomes if outcome.status == "graded"]
    rows = []
    for order, exercise in enumerate(exercises):
        items = [item for outcome in graded for item in outcome.exercises if item["exercise"] == exercise]
        passed = sum(1 for item in items if item["passed"])
        fractions = [item["score"] / item["max_score"] for item in items if item["max_score"]]
        rows.append({"exercise": exercise, "order": order, "graded": len(items), "passed": passed,
                     "pass_rate": passed / len(items) if items else None,
                     "mean_fraction": sum(fractions) / len(fractions) if fractions else None})
    return rows


def hardest_exercise(rows: list[dict]) -> str | None:
    """The exercise fewest submissions pass in full; None when none was graded or every graded
    submission earned full marks on every exercise (then no exercise is harder than another)."""
    ranked = [row for row in rows if row["pass_rate"] is not None]
    if not ranked or all(row["pass_rate"] == 1 for row in ranked):
        return None
    return min(ranked, key=lambda row: (row["pass_rate"], row["mean_fraction"], row["order"]))["exercise"]


def failing_tests(outcomes: list, exercises: list[str], top: int = TOP_FAILING_TESTS) -> list[dict]:
    """The tests failed by the most graded submissions (visible and hidden, by name)."""
    graded = [outcome for outcome in outcomes if outcome.status == "graded"]
    counts: dict[tuple, int] = {}
    for outcome in graded:
        for item in outcome.exercises:
            for test in item["tests"]:
                key = (test["exercise"], test["kind"], test["name"])
                counts[key] = counts.get(key, 0) + (0 if test["passed"] else 1)
    order = {name: index for index, name in enumerate(exercises)}
    ranked = sorted((key for key, count in counts.items() if count),
                    key=lambda key: (-counts[key], order.get(key[0], len(order)), key[2]))
    return [{"exercise": e, "kind": k, "name": n, "failed": counts[(e, k, n)],
             "fail_rate": counts[(e, k, n)] / len(graded)} for e, k, n in ranked[:top]]


def _plot(rows: list[dict], failing: list[dict], hardest: str | None, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [1.6, 3]})
    names = [row["exercise"] for row in rows]
    rates = [100 * (row["pass_rate"] or 0) for row in rows]
    left.bar(names, rates, color=["tab:red" if name == hardest else "tab:blue" for name in names])
    left.set_ylim(0, 100)
    left.set_ylabel("submissions with full marks (%)")
    left.set_title("Pass rate per exercise (red: hardest)")
    left.tick_params(axis="x", labelrotation=15)
    labels = [f"{item['name']} ({item['exercise']}, {item['kind']})" for item in reversed(failing)]
    right.barh(labels, [100 * item["fail_rate"] for item in reversed(failing)], color="tab:orange")
    right.set_xlim(0, 100)
    right.set_xlabel("submissions failing the test (%)")
    right.set_title("Most common failing tests")
    right.tick_params(axis="y", labelsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def time_lines(time: dict, outcomes: list) -> list[str]:
    """The class's time against its budget (`batch.class_time`), and the learners whose own code ran out of
    time (their loss: not graded again)."""
    if not time:
        return []
    lines = ["", "## Time", "",
             f"Budget {time['budget_s']:g} s (every submission its notebook limit, as many at once as there are "
             f"workers); the class took {time['wall_s']:g} s (workers' start and feedback included), "
             f"{time['submission_seconds']:g} s of submission time in all.",
             f"{time['learner_timeouts']} submission(s) ran out of time on their own account "
             f"({time['learner_timeout_seconds']:g} s in cells past their limit, graded as they are); "
             f"{time['graded_again']} graded again on evidence of contention "
             f"({time['first_attempt_seconds']:g} s of first attempts)."]
    own = [(outcome.student, (outcome.boundary or {}).get("learners_time") or {}) for outcome in outcomes]
    own = [(student, item) for student, item in own if item.get("cells")]
    if own:
        lines += ["", "| student | cells past their limit (learner's own) | seconds |", "|---|---|---|"]
        lines += [f"| {student} | {', '.join(item['cells'][:5])} | {item['seconds']:g} |" for student, item in own]
    return lines


def write_class_report(report, exercises: list[str], output_dir: Path) -> tuple[Path, str | None]:
    """Write `class_report.md` and `class_report.png` for a batch; return the markdown path and the hardest exercise."""
    outcomes = report.outcomes
    summary = score_summary(outcomes)
    rows = exercise_statistics(outcomes, exercises)
    hardest = hardest_exercise(rows)
    failing = failing_tests(outcomes, exercises)
    output_dir.mkdir(parents=True, exist_ok=True)
    png = output_dir / "class_report.png"
    _plot(rows, failing, hardest, f"{report.chapter}: {summary['graded']} graded submissions", png)
    lines = [f"# Class report: {report.chapter} ({report.slug})", ""]
    lines.append(f"{summary['submissions']} submissions, {summary['graded']} graded, "
                 f"{summary['not_graded']} not graded, {summary['graded_again_alone']} graded again alone; "
                 f"{report.jobs} parallel worker(s), "
                 f"{report.wall_seconds if report.wall_seconds is not None else '?'} s.")
    lines.append("")
    if hardest is not None:
        row = next(item for item in rows if item["exercise"] == hardest)
        lines.append(f"**Hardest exercise: `{hardest}`**: {100 * row['pass_rate']:.0f}% of graded submissions "
                     f"earn all of its points (mean {100 * row['mean_fraction']:.0f}% of its points).")
        lines.append("")
    elif summary["graded"]:
        lines += ["**Hardest exercise: none**: every graded submission earned full marks on every exercise.", ""]
    lines.append(f"![pass rates and failing tests]({png.name})")
    lines.append("")
    if summary["graded"]:
        lines += ["## Scores", "",
                  f"Mean {summary['mean']:g} / {summary['max_score']:g}, median {summary['median']:g}, "
                  f"min {summary['min']:g}, max {summary['max']:g}, full marks: {summary['full_marks']}.", "",
                  "| share of max score | submissions |", "|---|---|"]
        lines += [f"| {band} | {count} |" for band, count in summary["distribution"].items()]
        lines.append("")
    lines += ["## Exercises", "", "| exercise | graded | full marks | pass rate | mean share of points |",
              "|---|---|---|---|---|"]
    for row in rows:
        rate = "n/a" if row["pass_rate"] is None else f"{100 * row['pass_rate']:.0f}%"
        mean = "n/a" if row["mean_fraction"] is None else f"{100 * row['mean_fraction']:.0f}%"
        lines.append(f"| `{row['exercise']}` | {row['graded']} | {row['passed']} | {rate} | {mean} |")
    lines += ["", "## Most common failing tests", "",
              "| test | exercise | kind | failed by | share |", "|---|---|---|---|---|"]
    lines += [f"| `{item['name']}` | `{item['exercise']}` | {item['kind']} | {item['failed']} | "
              f"{100 * item['fail_rate']:.0f}% |" for item in failing]
    lines += time_lines(getattr(report, "time", None) or {}, outcomes)
    again = [outcome for outcome in outcomes if getattr(outcome, "regraded", None)]
    if again:
        lines += ["", "## Graded again", "",
                  "Each ran out of time with evidence that the host starved it and was graded a second time.",
                  "", "| student | first attempt | second attempt |", "|---|---|---|"]
        lines += [f"| {outcome.student} | {(outcome.regraded.get('first_reason') or '').replace('|', '/')} | "
                  f"{'graded' if outcome.status == 'graded' else 'not graded'} |" for outcome in again]
    not_graded = [outcome for outcome in outcomes if outcome.status != "graded"]
    if not_graded:
        lines += ["", "## Not graded", "", "| student | reason |", "|---|---|"]
        lines += [f"| {outcome.student} | {(outcome.reason or '').splitlines()[0].replace('|', '/')} |"
                  for outcome in not_graded]
    path = output_dir / "class_report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, hardest
