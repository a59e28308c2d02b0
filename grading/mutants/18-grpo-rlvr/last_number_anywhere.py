# mutant: last_number_anywhere
# exercise: verify_integer_answer
# mistake: searches the whole reply for the last run of digits, the way a quick regex scorer does, so "The answer is 42." is correct and unfinished replies are scored too.
import re


def verify_integer_answer(response, label, finished):
    if not all([isinstance(response, str), type(label) is int, type(finished) is bool]):
        raise ValueError("bad arguments")
    digits = re.findall(r"-?\d+", response)
    value = int(digits[-1]) if digits else None
    if value is None:
        verdict = "format_error" if finished else "truncated"
    else:
        verdict = "correct" if value == label else "wrong"
    return {"outcome": verdict, "parsed": value, "reward": float(verdict == "correct")}
