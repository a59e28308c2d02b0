# mutant: mask_by_token_value
# exercise: assemble_trajectory
# mistake: remembers the model's token ids and masks by value, so an environment token that happens to equal a model token enters the loss; the order is not checked either.
from itertools import accumulate


def assemble_trajectory(segments):
    well_formed = isinstance(segments, list) and len(segments) > 0 and all(
        isinstance(s, dict) and s.get("source") in {"prompt", "model", "env"} and isinstance(s.get("token_ids"), list)
        and len(s["token_ids"]) > 0 and all(isinstance(t, int) and t >= 0 for t in s["token_ids"]) for s in segments)
    if not well_formed:
        raise ValueError("malformed segments")
    chosen = {t for s in segments if s["source"] == "model" for t in s["token_ids"]}
    if not chosen:
        raise ValueError("no model turn")
    flat = [t for s in segments for t in s["token_ids"]]
    numbering = list(accumulate(int(s["source"] == "model") for s in segments))
    turns = [n - 1 if s["source"] == "model" else -1 for s, n in zip(segments, numbering) for _ in s["token_ids"]]
    return {"input_ids": flat, "loss_mask": [int(t in chosen) for t in flat], "turn_ids": turns,
            "model_turns": numbering[-1], "env_tokens": sum(len(s["token_ids"]) for s in segments if s["source"] == "env")}
