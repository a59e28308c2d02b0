# mutant: artifacts_raises
# exercise: artifact_checks
# mistake: raises on every input.
def artifact_checks(files, resume, reload, loss_tolerance=1e-6, eval_tolerance=1e-4):
    raise ValueError("no checks")
