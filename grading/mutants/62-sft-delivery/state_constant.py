# mutant: state_constant
# exercise: delivery_state
# mistake: always delivers.
def delivery_state(identity, integrity, evaluation):
    return {"state": "delivered", "reasons": [], "next_action": NEXT_ACTIONS["delivered"]}
