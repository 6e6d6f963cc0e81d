"""Record the golden corpus: `PYTHONPATH=src python -m tests.golden.record` (an embedded PostgreSQL of its own).

Writes tests/golden/corpus.jsonl: one line per action with its request and its answer, then one line with
the database's final content. Record only on purpose: a changed answer is a changed behaviour, committed
on its own with the reason for each change.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from nexus.store.database import Database
from tests.conftest import PostgresForTests, fast_settings
from tests.golden.driver import replay
from tests.golden.scenarios import build

CORPUS = Path(__file__).with_name("corpus.jsonl")


async def record(server: PostgresForTests) -> None:
    await server.create_template()
    url = await server.new_database()
    db = await Database(fast_settings(url)).open(migrate=False)
    try:
        actions = build()
        answers, snapshot = await replay(db, actions)
    finally:
        await db.close()
    with CORPUS.open("w", encoding="utf-8") as out:
        for action, answer in zip(actions, answers, strict=True):
            out.write(json.dumps({**action, "answer": answer}, sort_keys=True) + "\n")
        out.write(json.dumps({"op": "snapshot", "answer": snapshot}, sort_keys=True) + "\n")
    print(
        f"{len(actions)} actions, {sum(len(a.get('items', [1])) for a in actions)} items -> {CORPUS}", file=sys.stderr
    )


def main() -> None:
    server = PostgresForTests()
    try:
        asyncio.run(record(server))
    finally:
        server.close()


if __name__ == "__main__":
    main()
