"""The lesson text that Step 5 helpers fill from records: one string table, `lesson_text.toml`.

Code in `tools/chapters` decides which sentence a record calls for and which numbers go in it;
the sentences themselves (Simplified Chinese, like every notebook's prose) live in the table.
"""

from __future__ import annotations

import functools
import string
import tomllib
from pathlib import Path

from tools.errors import ConfigError

TABLE_PATH = Path(__file__).with_name("lesson_text.toml")


@functools.cache
def table() -> dict[str, dict[str, str]]:
    """`section -> key -> format string`, read once."""
    return tomllib.loads(TABLE_PATH.read_text(encoding="utf-8"))


def text(key: str, **fields) -> str:
    """The entry `section.key` of the table with `fields` filled in (`str.format`); exactly the fields the
    entry names must be given, so a renamed field cannot silently drop a number from a sentence."""
    section, _, name = key.partition(".")
    try:
        template = table()[section][name]
    except KeyError:
        raise ConfigError(f"{TABLE_PATH.name} has no entry {key!r}") from None
    expected = field_names(template)
    if set(fields) != expected:
        raise ConfigError(f"{TABLE_PATH.name} entry {key!r} takes the fields {sorted(expected)}, "
                          f"got {sorted(fields)}")
    return template.format(**fields)


def field_names(template: str) -> set[str]:
    """The named fields a format string expects."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}
