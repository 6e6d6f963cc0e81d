"""`nexus check`: check an agent's report against PostgreSQL and the sink's log (`nexus_lab.checker`), or an
LLM planner's report (`nexus_lab.llm.check`). The command sits above both checkers, which know nothing of
each other."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from nexus.store.database import Database
from nexus_lab.checker import check_report, render


def configure(parser: argparse.ArgumentParser) -> None:
    from nexus.cli_common import add_common

    parser.add_argument("report", type=Path, help="the agent's report (nexus agent --report)")
    parser.add_argument("--sink-log", type=Path, default=None, help="the sink's log (nexus sink --log)")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for deliveries to settle")
    parser.add_argument(
        "--allow-duplicates", action="store_true", help="accept redeliveries (at-least-once) of a notification"
    )
    add_common(parser)


async def _main(args: argparse.Namespace) -> int:
    from nexus.cli_common import settings_from

    report = json.loads(args.report.read_text())
    settings = settings_from(args)
    db = await Database(settings).open(migrate=False)
    if report.get("kind") == "llm":  # an LLM planner's report
        from nexus_lab.llm import check as llm_check

        try:
            llm_result = await llm_check.check_llm_report(report, db)
        finally:
            await db.close()
        print(llm_check.render(llm_result, len(report["plans"])))
        return 0 if llm_result.ok else 1
    try:
        result = await check_report(
            report, db, args.sink_log, settings=settings, wait_s=args.wait, allow_duplicates=args.allow_duplicates
        )
    finally:
        await db.close()
    print(render(result, len(report["plans"])))
    return 0 if result.ok else 1


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_main(args))
    except (OSError, ValueError, KeyError) as exc:
        print(f"nexus check: {exc}", file=sys.stderr)
        return 2
