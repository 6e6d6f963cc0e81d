"""`nexus processes check` refuses effects that cannot keep the saga's promise (core/saga.effect_layout_problem)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nexus.core.process_compile import compile_definition
from nexus.core.process_model import DefinitionError
from nexus.processes import builtin_sources

_HEAD = """name: shop
version: 1
states: [created, paid, shipped, done]
terminal: [done]
steps:
  Created: {from: [null], to: created}
"""


def _definition(pay: str, ship: str, done: str = "{from: [shipped], to: done}") -> str:
    return f"{_HEAD}  Paid: {pay}\n  Shipped: {ship}\n  Done: {done}\n"


PAY = "{from: [created], to: paid, effect: {service: payment, path: /charges, compensation: {path: /refunds}}}"
SHIP = "{from: [paid], to: shipped, pivot: true, effect: {service: shipping, path: /shipments}}"


def test_a_sound_definition_and_the_shipped_processes_pass() -> None:
    """Compensable effects before the pivot, retriable ones after it: accepted; so is every shipped process."""
    done = "{from: [shipped], to: done, effect: {service: invoice, path: /invoices}}"
    assert compile_definition(_definition(PAY, SHIP, done)).name == "shop"
    for source in builtin_sources():
        compile_definition(source.text)


@pytest.mark.parametrize(
    ("pay", "ship", "reason"),
    [
        ("{from: [created], to: paid, effect: {service: payment, path: /charges}}", SHIP,
         "step Paid has an effect before the pivot but no compensation"),
        (PAY, "{from: [paid], to: shipped, effect: {service: shipping, path: /shipments}}",
         "have effects but no step is the pivot"),
    ],
)  # fmt: skip
def test_an_uncompensated_effect_before_the_pivot_or_no_pivot_is_refused(pay: str, ship: str, reason: str) -> None:
    """An effect before the pivot without a compensation, or effects without a pivot, is a definition error."""
    with pytest.raises(DefinitionError, match=reason):
        compile_definition(_definition(pay, ship))


def test_processes_check_exits_1_with_the_line(tmp_path: Path) -> None:
    """`nexus processes check` prints the reason at the step's line and exits 1."""
    path = tmp_path / "shop.yaml"
    path.write_text(_definition("{from: [created], to: paid, effect: {service: payment, path: /charges}}", SHIP))
    done = subprocess.run([sys.executable, "-m", "nexus.cli", "processes", "check", str(path)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 1
    assert f"{path}:7: step Paid has an effect before the pivot but no compensation" in done.stderr
