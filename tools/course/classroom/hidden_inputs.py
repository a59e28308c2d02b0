"""The inputs hidden tests send to the learner's functions, as text a leak scan can look for.

No output of the learner's kernel is kept while a test runs (`split_execute`), so a learner's function has no
channel to show the arguments it receives. As a second line, the trusted grader records what hidden test
cells sent (`InputRecorder`: distinctive strings, tensors and lists of numbers, as `repr` shows them) and the
feedback and the autograded notebook are scanned for them (`find_inputs`) before anything is written for the
learner: an output that shows one is withheld.

Text is compared normalized (no ANSI colours, no whitespace, one kind of quote), by fixed-length prefixes of
`FINGERPRINT_CHARS` characters, so that a scan costs one set lookup per character of text.
"""

from __future__ import annotations

import re
from typing import Any

from tools.course.grader.codec import is_tensor

FINGERPRINT_CHARS = 24
MIN_DISTINCT_CHARS = 6
MAX_FINGERPRINTS = 2000
MIN_NUMBERS = 4
_SPACE = re.compile(r"\s+")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def normalize(text: str) -> str:
    """Text as compared for leaks: no ANSI colours, no whitespace, one kind of quote."""
    return _SPACE.sub("", _ANSI.sub("", text)).replace('"', "'")


def fingerprint(text: str) -> str | None:
    """The fixed-length prefix of `text`, normalized; None when too short or too plain to tell anything."""
    flat = normalize(text)
    if len(flat) < FINGERPRINT_CHARS:
        return None
    head = flat[:FINGERPRINT_CHARS]
    return head if len(set(head)) >= MIN_DISTINCT_CHARS else None


def _texts(value: Any, depth: int = 0):
    if depth > 8:
        return
    if type(value) is str:
        yield value
    elif is_tensor(value):
        if value.numel() >= MIN_NUMBERS:
            yield repr(value.detach())
    elif type(value) in (list, tuple):
        if len(value) >= MIN_NUMBERS and all(type(item) in (int, float) for item in value):
            yield repr(value)
        else:
            for item in value:
                yield from _texts(item, depth + 1)
    elif type(value) is dict:
        for item in value.values():
            yield from _texts(item, depth + 1)


class InputRecorder:
    """Fingerprints of the arguments sent while `active` (a hidden test cell runs), at most `MAX_FINGERPRINTS`."""

    def __init__(self, limit: int = MAX_FINGERPRINTS):
        self.limit = limit
        self.active = False
        self.found: list[str] = []
        self._seen: set[str] = set()

    def __call__(self, args: tuple, kwargs: dict) -> None:
        if not self.active or len(self._seen) >= self.limit:
            return
        try:
            for text in _texts((args, kwargs)):
                mark = fingerprint(text)
                if mark is not None and mark not in self._seen:
                    self._seen.add(mark)
                    self.found.append(mark)
                    if len(self._seen) >= self.limit:
                        return
        except Exception:  # noqa: BLE001, S110 - a value whose repr fails is not recorded; the test goes on
            return

    def take(self) -> list[str]:
        """What was recorded since the last `take`."""
        found, self.found = self.found, []
        return found


def public_free(fingerprints: list[str], *public: str) -> list[str]:
    """The fingerprints no public text (the released notebook, the chapter's notebook) shows."""
    seen = normalize("\n".join(public))
    return [mark for mark in fingerprints if mark not in seen]


def find_inputs(text: str, fingerprints: set[str] | frozenset[str]) -> list[str]:
    """The fingerprints that occur in `text` (not yet normalized)."""
    if not fingerprints or not text:
        return []
    flat = normalize(text)
    size = FINGERPRINT_CHARS
    return sorted({flat[i:i + size] for i in range(len(flat) - size + 1) if flat[i:i + size] in fingerprints})
