"""Sizes a reader can hold in mind (docs/architecture.md): no function over 120 lines and no class
over 250 lines in the product and its harness (tests aside), read from the source."""

from __future__ import annotations

import ast

from tests.test_layers import modules

MAX_FUNCTION_LINES = 120
MAX_CLASS_LINES = 250


def too_long(source: str) -> list[tuple[str, int]]:
    """The functions and classes of ``source`` over their limit, with their length in lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        limit = (
            MAX_FUNCTION_LINES
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            else MAX_CLASS_LINES
            if isinstance(node, ast.ClassDef)
            else None
        )
        if limit is not None and (length := node.end_lineno - node.lineno + 1) > limit:  # type: ignore[operator]
            found.append((node.name, length))
    return found


def test_no_function_or_class_is_over_its_limit():
    over = [
        f"{module}.{name}: {length} lines"
        for module, path in modules().items()
        for name, length in too_long(path.read_text())
    ]
    assert not over, "split these (docs/architecture.md):\n" + "\n".join(over)


def test_a_long_function_is_caught():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert too_long(f"def f():\n{body}\n") == [("f", MAX_FUNCTION_LINES + 1)]
    assert too_long("class C:\n    def f(self):\n        return 1\n") == []
