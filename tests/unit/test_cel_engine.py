"""The CEL engine is loaded without the `cel` package's command line, and stays the package's own module."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys
import nexus.core.checks as checks
from nexus.core.cel_engine import cel
ctx = cel.Context()
ctx.update({"data": {"amount": 7}})
print(cel.evaluate("data.amount <= 10", ctx))
print(sorted(m for m in ("typer", "rich", "prompt_toolkit", "cel.cli") if m in sys.modules))
import cel as package
print(package.compile is cel.compile and package.Context is cel.Context)
"""


@pytest.mark.processes
def test_checks_load_the_engine_without_its_command_line_and_the_package_reuses_it() -> None:
    """A fresh interpreter importing the checks evaluates CEL without typer, rich or prompt_toolkit
    loaded (a quarter of a second of every `nexus` start), and a later `import cel` gets the same engine."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[:3] == ["True", "[]", "True"], out.stdout + out.stderr
