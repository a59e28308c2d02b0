# mutant: share_of_all_judgements
# exercise: pairwise_win_rate
# mistake: a learner's protocol that takes wins over every judgement (ties and inconsistent ones included) with a textbook normal interval.
import math
import statistics

_TABLE = {("first", "second"): "win", ("second", "first"): "loss", ("tie", "tie"): "tie"}


def _checked(judgements, confidence):
    if type(confidence) not in (int, float) or not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    if not isinstance(judgements, (list, tuple)):
        raise ValueError("need a list")
    names = set()
    for entry in judgements:
        if not isinstance(entry, dict) or sorted(entry) != ["candidate_first", "candidate_second", "id"]:
            raise ValueError("bad judgement")
        if not isinstance(entry["id"], str) or not entry["id"].strip() or entry["id"] in names:
            raise ValueError("bad id")
        names.add(entry["id"])
        if entry["candidate_first"] not in ("first", "second", "tie") or entry["candidate_second"] not in ("first", "second", "tie"):
            raise ValueError("bad verdict")
    return {e["id"]: _TABLE.get((e["candidate_first"], e["candidate_second"]), "inconsistent") for e in judgements}


def pairwise_win_rate(judgements, confidence=0.95):
    outcomes = _checked(judgements, confidence)
    tally = {kind: list(outcomes.values()).count(kind) for kind in ("win", "loss", "tie", "inconsistent")}
    report = {"outcomes": outcomes, "counts": tally, "consistent": tally["win"] + tally["loss"], "win_rate": None,
              "interval": None, "decision": "undecided"}
    if outcomes:
        rate = tally["win"] / len(outcomes)
        spread = statistics.NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(rate * (1 - rate) / len(outcomes))
        report.update(win_rate=rate, interval=[max(0.0, rate - spread), min(1.0, rate + spread)])
        report["decision"] = ("candidate_better" if rate - spread > 0.5 else
                              "baseline_better" if rate + spread < 0.5 else "undecided")
    return report
