"""The chaos page lists every scenario `nexus chaos` runs."""

from __future__ import annotations

import re
from pathlib import Path

from nexus_lab.chaos.scenarios import SCENARIOS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "chaos.md"


def test_the_chaos_page_has_a_row_for_every_scenario() -> None:
    """Each scenario of `nexus chaos --list` is a row of docs/chaos.md, and the page names no other."""
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", PAGE.read_text(), re.M))
    assert rows == set(SCENARIOS)
