# mutant: weights_without_counts
# exercise: kto_class_weights
# mistake: a learner's check of lambda_D / lambda_U alone against [1, 4/3], forgetting that the range is about the weighted counts.
import math


def _counts(labels):
    if type(labels) not in (list, tuple) or any(type(label) is not bool for label in labels):
        raise ValueError("labels must be bools")
    tally = (labels.count(True), labels.count(False))
    if 0 in tally:
        raise ValueError("both classes are needed")
    return tally


def _positive(*values):
    if any(type(value) not in (int, float) or not math.isfinite(value) or value <= 0 for value in values):
        raise ValueError("weights must be positive numbers")


def kto_class_weights(labels, undesirable_weight=1.0, desirable_weight=None):
    good, bad = _counts(labels)
    _positive(undesirable_weight, 1.0 if desirable_weight is None else desirable_weight)
    chosen = float(desirable_weight or undesirable_weight)
    if not 1 <= chosen / undesirable_weight <= 4 / 3:
        raise ValueError(f"lambda_D / lambda_U = {chosen / undesirable_weight} is outside [1, 4/3]")
    return dict(n_desirable=good, n_undesirable=bad, desirable_weight=chosen, undesirable_weight=float(undesirable_weight),
                ratio=chosen / undesirable_weight, desirable_range=[float(undesirable_weight), undesirable_weight * 4 / 3])
