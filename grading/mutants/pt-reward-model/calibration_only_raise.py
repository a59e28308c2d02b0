# mutant: calibration_only_raise
# exercise: calibrate_temperature
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def calibrate_temperature(margins, labels, temperatures, n_bins=5):
    raise ValueError("not implemented")
