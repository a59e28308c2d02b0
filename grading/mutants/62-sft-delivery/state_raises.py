# mutant: state_raises
# exercise: delivery_state
# mistake: raises on every input.
def delivery_state(identity, integrity, evaluation):
    raise ValueError("no state")
