"""Size limits of the decision path: no module over 500 lines and no function over 60 lines in the pure
core (src/nexus/core) and the gateway (src/nexus/gateway.py); ruff has no such rule, so the AST is walked."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "nexus"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


# Data written by `make schemas` from the YAML definitions, not code: its length is the definitions'.
GENERATED = {SRC / "core" / "shipped.py"}


def _modules() -> list[Path]:
    return [*sorted(p for p in (SRC / "core").rglob("*.py") if p not in GENERATED), SRC / "gateway.py"]


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def oversized(path: Path) -> list[str]:
    """What in `path` is over the limits, as `path:line name (n lines)`."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{path.name}: module of {lines} lines")
    for fn in _functions(ast.parse(text)):
        length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
        if length > MAX_FUNCTION_LINES:
            found.append(f"{path.name}:{fn.lineno} {fn.name} ({length} lines)")
    return found


def test_core_and_gateway_stay_within_size_limits() -> None:
    """Every module of nexus/core and gateway.py has at most 500 lines, and every function at most 60."""
    found = [problem for path in _modules() for problem in oversized(path)]
    assert found == []


def test_the_size_check_finds_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    """A 61-line function (nested in a class) and a 501-line module are both reported."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    filler = "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES)
    probe = tmp_path / "probe.py"
    probe.write_text(f"class C:\n    def big(self):\n{body}\n{filler}", encoding="utf-8")
    assert oversized(probe) == ["probe.py: module of 502 lines", "probe.py:2 big (61 lines)"]
