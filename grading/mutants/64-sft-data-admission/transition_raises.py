# mutant: transition_raises
# exercise: admission_transition
# mistake: raises on every input.
def admission_transition(history, admission, max_repairs=2):
    raise ValueError("illegal")
