"""The golden corpus (tests/golden): a few hundred recorded requests replayed through the real gateway on a
real PostgreSQL answer exactly as recorded, and leave the same rows behind."""

from __future__ import annotations

import json
from typing import Any

from nexus.store.database import Database
from tests.golden.driver import replay
from tests.golden.record import CORPUS


def _load() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
    *actions, snapshot = lines
    assert snapshot["op"] == "snapshot"
    return actions, snapshot["answer"]


async def test_the_golden_corpus_replays_identically(db: Database) -> None:
    """Every recorded request gets its recorded answer, and the final content of the tables is the recorded one."""
    actions, recorded_snapshot = _load()
    requests = [{k: v for k, v in a.items() if k != "answer"} for a in actions]
    answers, snapshot = await replay(db, requests)
    for n, (action, answer) in enumerate(zip(actions, answers, strict=True)):
        assert answer == json.loads(json.dumps(action["answer"])), f"action {n}: {json.dumps(requests[n])[:400]}"
    snapshot = json.loads(json.dumps(snapshot, default=str))
    for table, rows in recorded_snapshot.items():
        assert snapshot[table] == rows, f"table {table} differs"
