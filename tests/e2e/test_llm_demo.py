"""`make demo-llm`, short: the demo creates the agent key it needs and every invariant holds (it failed
with HTTP 401 once keys landed, and nothing ran it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_llm_demo_runs_with_its_own_key_and_holds_every_invariant() -> None:
    """`python -m nexus_lab.llm.demo --orders 4` (what `make demo-llm` runs, with fewer plans) exits 0, with
    no NEXUS_API_KEY in its environment, and prints the blocked actions and the held invariants."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    done = subprocess.run(
        [sys.executable, "-m", "nexus_lab.llm.demo", "--orders", "4", "--seed", "short"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Blocked actions" in output and "all invariants held" in output, output
