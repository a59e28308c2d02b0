# mutant: calibration_constant
# exercise: calibrate_temperature
# mistake: always answers temperature 1 with made-up errors.
def calibrate_temperature(margins, labels, temperatures, n_bins=5):
    return {"temperature": 1.0, "nll_before": 0.5, "nll_after": 0.5, "ece_before": 0.1, "ece_after": 0.1}
