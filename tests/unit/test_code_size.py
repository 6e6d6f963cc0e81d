"""Size limits and lint suppressions across all of src/: no module over 500 lines, no function over 60 lines, no
class over 300 lines, no `noqa` or `type: ignore` without its reason, and one import path per public name (no
module re-exports a name another module defines); ruff has no such rules, so the AST and the comments are read
here."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300

# What may pass the limits, each with its reason: `path` for a module, `path::name` for a function or class
# (paths relative to src/). Generated data is the one reason allowed; there is none in src/ today.
EXCEPTIONS: dict[str, str] = {}


# Modules that may re-export names defined elsewhere, each with its reason. A distribution's own surface is the
# one lasting reason; the others are temporary.
RE_EXPORTS = {
    "nexus_client": "the SDK's documented import surface (README: `from nexus_client import ... EventEnvelope`)",
    "nexus_client.kafka": "the SDK's Kafka producer, its documented module, over the shared nexus_wire.kafka",
    "nexus_wire.kafka": "the shared package's Kafka module, its documented surface (its security settings)",
}


# A suppression's reason follows its codes: after " - " for noqa, after a second "#" for type: ignore (the one
# form mypy accepts).
SUPPRESSION = re.compile(r"#\s*(noqa|type:\s*ignore)\b(?P<codes>(:\s*[A-Z0-9]+(\s*,\s*[A-Z0-9]+)*)|(\[[^\]]*\]))?")
REASON = re.compile(r"\s*(-{1,2}|#)\s*\S")


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _defs(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node


def oversized(path: Path, root: Path = SRC) -> list[str]:
    """What in `path` is over the limits and not excepted, as `path:line name (n lines)`."""
    name = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8")
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES and name not in EXCEPTIONS:
        found.append(f"{name}: module of {lines} lines")
    for node in _defs(ast.parse(text)):
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
        if length > limit and f"{name}::{node.name}" not in EXCEPTIONS:
            found.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    return found


def unexplained(path: Path, root: Path = SRC) -> list[str]:
    """The `noqa` and `type: ignore` comments in `path` that give no reason after their codes."""
    name = path.relative_to(root).as_posix()
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = SUPPRESSION.search(token.string)
        if match and not REASON.match(token.string[match.end() :]):
            found.append(f"{name}:{token.start[0]} {token.string}")
    return found


def module_name(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def re_exported(path: Path, root: Path = SRC) -> list[str]:
    """The names `path` re-exports (listed in `__all__`, or imported `as` themselves) that another module
    defines; a package's own submodules' names are its to export."""
    name = module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported |= {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith(f"{name}."):
            for alias in node.names:
                if (alias.asname or alias.name) in exported or alias.asname == alias.name:
                    found.append(f"{name}: {alias.asname or alias.name} (from {node.module})")
    return found


def test_src_stays_within_size_limits() -> None:
    """Every module of src/ has at most 500 lines, every function 60 and every class 300, but the exceptions."""
    found = [problem for path in _modules() for problem in oversized(path)]
    assert found == []


def test_every_exception_is_still_needed() -> None:
    """Each excepted module, function or class still exists and is still over its limit."""
    over = set()
    for path in _modules():
        name = path.relative_to(SRC).as_posix()
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            over.add(name)
        for node in _defs(ast.parse(text)):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if (node.end_lineno or node.lineno) - node.lineno + 1 > limit:
                over.add(f"{name}::{node.name}")
    assert set(EXCEPTIONS) - over == set()


def test_every_suppression_says_why() -> None:
    """Every `noqa` and `type: ignore` in src/ is followed by a short reason."""
    found = [problem for path in _modules() for problem in unexplained(path)]
    assert found == []


def test_one_import_path_per_public_name() -> None:
    """No module of src/ re-exports a name another module defines (a facade gives a name two import paths; mypy's
    no-implicit-reexport then keeps src/ from importing it by the other), but the listed ones."""
    found = [problem for path in _modules() if module_name(path) not in RE_EXPORTS for problem in re_exported(path)]
    assert found == []
    assert {module_name(path) for path in _modules() if re_exported(path)} == set(RE_EXPORTS)


def test_the_re_export_check_finds_a_facade(tmp_path: Path) -> None:
    """A name in `__all__` imported from another module, or imported `as` itself, is a re-export; a name imported
    for use, or a package's own submodule's, is not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.inner import A\n__all__ = ['A']\n", encoding="utf-8")
    probe = package / "facade.py"
    probe.write_text(
        "from other import B, C\nfrom other import D as D\nfrom other import E\n__all__ = ['B', 'F']\nF = E\n",
        encoding="utf-8",
    )
    assert re_exported(package / "__init__.py", tmp_path) == []
    assert re_exported(probe, tmp_path) == ["pkg.facade: B (from other)", "pkg.facade: D (from other)"]


def test_the_size_check_finds_a_long_function_class_and_module(tmp_path: Path) -> None:
    """A 61-line function nested in a 301-line class in a 501-line module is reported three times."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    members = "\n".join(f"    y{i} = {i}" for i in range(MAX_CLASS_LINES - MAX_FUNCTION_LINES - 1))
    filler = "\n" * (MAX_MODULE_LINES - MAX_CLASS_LINES)
    probe = tmp_path / "probe.py"
    probe.write_text(f"class C:\n    def big(self):\n{body}\n{members}\n{filler}", encoding="utf-8")
    assert oversized(probe, tmp_path) == [
        "probe.py: module of 501 lines",
        "probe.py:1 C (301 lines)",
        "probe.py:2 big (61 lines)",
    ]


def test_the_suppression_check_finds_a_bare_noqa_and_type_ignore(tmp_path: Path) -> None:
    """A `noqa` or `type: ignore` without a reason is reported; with one, or inside a string, it is not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "a = 1  # noqa: S105\n"
        "b = 2  # type: ignore[misc]\n"
        "c = 3  # noqa\n"
        "d = 4  # noqa: S105 - the format's prefix, not a secret\n"
        "e = 5  # type: ignore[misc]  # the stubs lack it\n"
        "f = '# noqa: S105'\n",
        encoding="utf-8",
    )
    assert unexplained(probe, tmp_path) == [
        "probe.py:1 # noqa: S105",
        "probe.py:2 # type: ignore[misc]",
        "probe.py:3 # noqa",
    ]
