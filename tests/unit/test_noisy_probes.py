"""The noisy neighbour's probes: how a PostgreSQL backend's state is counted."""

from __future__ import annotations

from nexus_lab.bench.noisy_probes import classify


def test_a_backend_is_classed_by_its_state_and_what_it_waits_for() -> None:
    """Idle backends are not counted; idle in transaction is the gateway's time; an active one is on a core or
    waiting for a lock, the WAL, another process or its client."""
    assert classify("idle", None) is None
    assert classify("idle in transaction", "Client") == "in_tx"
    assert classify("active", None) == "cpu"
    assert [classify("active", w) for w in ("Lock", "LWLock", "IO", "IPC", "Client", "Timeout")] == [
        "lock", "lwlock", "io", "ipc", "client", "other",
    ]  # fmt: skip
