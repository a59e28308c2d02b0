# mutant: artifacts_constant
# exercise: artifact_checks
# mistake: reports every check as passed without looking.
def artifact_checks(files, resume, reload, loss_tolerance=1e-6, eval_tolerance=1e-4):
    names = ("files_intact", "resume_continues", "reload_reproduces")
    return {"checks": [{"name": name, "passed": True, "findings": []} for name in names], "passed": True}
