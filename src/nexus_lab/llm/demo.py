"""`make demo-llm`: 20 plans through the LLM planner against the fake model with every behaviour on.

Starts `nexus serve` (embedded PostgreSQL in a temporary --data-dir) and `nexus fake-llm` (every
behaviour in a seeded order, a 429 every 9th request and a 500 every 13th), runs the planner in this
process through the same `openai` client a real provider would get, checks the report against PostgreSQL
(`nexus check`'s LLM checks), prints the plans, the blocked-actions table and the invariants, and stops
everything it started.

    python -m nexus_lab.llm.demo [--orders 20] [--seed demo] [--concurrency 4] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_client import ClientConfig
from nexus_lab.agent.runner import write_report
from nexus_lab.llm import behaviours as bh
from nexus_lab.llm import check, runner
from nexus_lab.llm.settings import LlmSettings
from nexus_lab.procs import Workspace, free_port, new_keys, nexus, wait_ready
from nexus_lab.tables import text_table


def behaviours_from_log(path: Path) -> dict[str, str]:
    """order_id -> the behaviour the fake model played for it, from its request log."""
    seen: dict[str, str] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("behaviour"):
                seen[record["order_key"]] = record["behaviour"]
    return seen


def plans_table(report: dict[str, Any], played: dict[str, str]) -> str:
    rows = []
    for p in report["plans"]:
        behaviour = played.get(p["order_id"], "?")
        codes = {**p["rejections"], **p["planner_rejections"]}
        rejected = ", ".join(f"{c} x{n}" for c, n in codes.items()) or "-"
        expected = bh.EXPECTED.get(behaviour)
        ok = expected is not None and expected[0] == p["status"] and bool(expected[2]) == bool(p["gave_up"])
        rows.append(
            (p["index"], behaviour, p["status"], p["proposals"], p["applied"], rejected, p["corrections"],
             "yes" if p["gave_up"] else "-", "as expected" if ok else "UNEXPECTED")
        )  # fmt: skip
    header = ["plan", "model behaviour", "status", "proposals", "applied", "rejected", "corrections", "gave up", ""]
    return text_table("Plans", header, rows, "rllrrlrll")


async def _main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    work = Workspace("nexus-demo-llm-", keep=args.keep)
    tmp, env, children = work.dir, work.env, work.children
    fake_log = tmp / "fake-llm.jsonl"
    llm_port, http_port = free_port(), free_port()
    print(f"nexus demo-llm: working in {tmp}", flush=True)
    with work:
        fake_args = ["fake-llm", "--port", str(llm_port), "--seed", args.seed, "--log", str(fake_log)]
        fake_args += ["--rate-limit-every", "9", "--server-error-every", "13", "--retry-after", "0"]
        children.append(nexus("fake-llm", fake_args, env, tmp / "fake-llm.out").start())
        serve_args = ["serve", "--data-dir", str(tmp / "data"), "--http-port", str(http_port), "--no-dispatcher"]
        children.append(nexus("gateway", serve_args, {**env, "NEXUS_LOG_LEVEL": "WARNING"}, tmp / "serve.out").start())
        await wait_ready(children[0], f"http://127.0.0.1:{llm_port}/healthz", 20)
        print(f"  fake model on :{llm_port} (every behaviour; 429 every 9th request, 500 every 13th)", flush=True)
        gateway_url = f"http://127.0.0.1:{http_port}"
        await wait_ready(children[1], gateway_url + "/readyz", 120)
        print(f"  gateway on {gateway_url} (embedded PostgreSQL)", flush=True)
        (key,) = await new_keys(tmp / "data", ("default", Role.AGENT, "demo-llm-agent"))
        settings = LlmSettings(
            base_url=f"http://127.0.0.1:{llm_port}/v1", model="nexus-fake-1", retry_base_ms=20, retry_max_ms=200
        )
        report = await runner.run_llm_agent(
            settings, orders=args.orders, seed=args.seed, concurrency=args.concurrency,
            gateway=ClientConfig(gateway_url=gateway_url, api_key=key),
        )  # fmt: skip
        write_report(report, tmp / "llm-report.json")
        if report["error"]:
            print(f"nexus demo-llm: the planner stopped: {report['error']}", file=sys.stderr)
            return 1
        db = await Database(Settings(data_dir=tmp / "data")).open(migrate=False)
        try:
            result = await check.check_llm_report(report, db)
        finally:
            await db.close()
        s = report["summary"]
        print()
        print(plans_table(report, behaviours_from_log(fake_log)))
        print()
        print(runner.blocked_table(report))
        print()
        print(
            f"model: {s['requests']} requests ({s['rate_limited']} answered 429, {s['server_errors']} 500, "
            f"{s['retries']} retried), {s['tokens']} tokens, {s['tokens_per_applied_step']} per applied step"
        )
        print()
        print("Invariants (nexus check)\n" + check.render(result, len(report["plans"])))
        print(f"\n{len(report['plans'])} plans in {time.monotonic() - started:.1f}s")
        if args.keep:
            print(f"report, request log and process logs kept in {tmp}")
        return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nexus_lab.llm.demo", description=__doc__)
    parser.add_argument("--orders", type=int, default=20)
    parser.add_argument("--seed", default="demo")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
