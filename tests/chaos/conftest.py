"""The chaos tests' one session: an embedded PostgreSQL server for every scenario (each on a fresh database)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nexus_lab.chaos.harness import ChaosSession


@pytest.fixture(scope="session")
def chaos_session() -> Iterator[ChaosSession]:
    """One embedded PostgreSQL server for the chaos scenarios; each scenario gets a fresh database on it."""
    s = ChaosSession().start()
    yield s
    s.close()
