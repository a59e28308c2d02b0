# mutant: released_to_back
# exercise: reserve_and_activate
# mistake: puts a released batch at the end of the free list, so the oldest rollouts wait behind newer ones.
import math


def reserve_and_activate(queue, events, batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    ids = list(queue)
    if any(not isinstance(rid, str) or not rid for rid in ids):
        raise ValueError("rollout ids must be non-empty strings")
    if len(set(ids)) != len(ids):
        raise ValueError("the queue holds a rollout id twice")
    for event in events:
        if event.get("op") not in ("reserve", "activate"):
            raise ValueError(f"unknown op {event.get('op')!r}")
        consumer = event.get("consumer")
        if not isinstance(consumer, str) or not consumer:
            raise ValueError("every event needs a non-empty consumer")
        if event["op"] == "activate" and not isinstance(event.get("ok"), bool):
            raise ValueError("an activate event needs ok = True or False")

    position = {rid: index for index, rid in enumerate(ids)}
    free = list(ids)
    reserved = {}
    consumed = {}
    log = []
    for event in events:
        op, consumer = event["op"], event["consumer"]
        changed = []
        if op == "reserve":
            if consumer in reserved:
                outcome = "already_reserved"
            elif len(free) < batch_size:
                outcome = "insufficient"
            else:
                changed, free = free[:batch_size], free[batch_size:]
                reserved[consumer] = changed
                outcome = "reserved"
        elif consumer not in reserved:
            outcome = "no_reservation"
        else:
            changed = reserved.pop(consumer)
            if event["ok"]:
                for rid in changed:
                    consumed[rid] = consumer
                outcome = "activated"
            else:
                free = free + changed
                outcome = "released"
        log.append({"op": op, "consumer": consumer, "outcome": outcome, "rollout_ids": list(changed)})
    return {"log": log, "consumed": consumed, "reserved": {c: list(v) for c, v in reserved.items()},
            "free": free}
