# mutant: choice_raises
# exercise: choose_candidate
# mistake: raises on every input.
def choose_candidate(gated):
    raise ValueError("cannot choose")
