"""The layers hold where import-linter cannot look: app.py is a module, not a package."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported(path):
    """Top-level names of every module a file imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_app_imports_neither_training_nor_benchmarks():
    assert {"ui", "gradio"} <= imported(ROOT / "app.py")
    assert not imported(ROOT / "app.py") & {"training", "benchmarks"}


def test_nothing_below_the_app_imports_it():
    for folder in ("zoo", "ui", "training"):
        for path in (ROOT / folder).rglob("*.py"):
            assert "app" not in imported(path), path
