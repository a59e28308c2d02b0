"""The lesson text of `tools/chapters` lives in one string table (`lesson_text.toml`), not in code."""

from __future__ import annotations

import ast
import re

import pytest

from chapter_factory import REPO_ROOT
from tools.chapters import lesson_text
from tools.errors import ConfigError

CHAPTERS = REPO_ROOT / "tools" / "chapters"
CHINESE = re.compile(r"[\u4e00-\u9fff]")


def string_constants(path) -> list[tuple[int, str]]:
    """Every string literal of a module, f-string parts included, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_chinese_sentence_is_built_in_code():
    found = [f"{path.name}:{line}" for path in sorted(CHAPTERS.rglob("*.py"))
             for line, value in string_constants(path) if CHINESE.search(value)]
    assert found == []


def keys_named_in_code() -> set[str]:
    sections = set(lesson_text.table())
    return {value for path in sorted(CHAPTERS.rglob("*.py")) for _, value in string_constants(path)
            if re.fullmatch(r"[a-z_]+\.[a-z_]+", value) and value.split(".")[0] in sections}


def test_every_entry_is_used_and_every_used_entry_exists():
    table = {f"{section}.{key}" for section, entries in lesson_text.table().items() for key in entries}
    assert keys_named_in_code() == table


def test_an_entry_takes_exactly_its_fields():
    assert lesson_text.text("verl.checks_all_passed", passed=3, total=4, status="ok") == "检查：3/4 项通过，状态 `ok`。"
    with pytest.raises(ConfigError, match="takes the fields"):
        lesson_text.text("verl.checks_all_passed", passed=3, total=4)
    with pytest.raises(ConfigError, match="takes the fields"):
        lesson_text.text("verl.checks_all_passed", passed=3, total=4, status="ok", extra=1)
    with pytest.raises(ConfigError, match="no entry"):
        lesson_text.text("verl.no_such_sentence")


def test_a_sentence_in_code_would_be_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""说明。"""\nvalue = f"共 {3} 条"\n', encoding="utf-8")
    assert {line for line, value in string_constants(probe) if CHINESE.search(value)} == {2}
