"""The LLM planner's own overhead against the fake model: steps/s and tokens per applied step.

    .venv/bin/python benchmarks/llm_planner.py [--plans 40] [--concurrency 1 16] [--json FILE]

Starts `nexus fake-llm` (every answer correct, or `--behaviours` a mix) and `nexus serve --no-dispatcher`
(embedded PostgreSQL in a temporary directory), then runs the planner in this process, once per
concurrency, on fresh orders. Per run: applied steps per second (wall clock), model requests and tokens
per applied step (the fake counts ~4 characters a token, as tokenizers roughly do for JSON), and this
process's CPU seconds per applied step: the planner's own overhead (LangGraph, the openai client, the SDK,
JSON), since the model and the gateway run in other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from nexus_client import ClientConfig
from nexus_lab.llm.runner import run_llm_agent
from nexus_lab.llm.settings import LlmSettings
from nexus_lab.procs import Proc, free_port, nexus, wait_ready


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="nexus-llm-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    llm_port, http_port = free_port(), free_port()
    children: list[Proc] = []
    rows = []
    try:
        fake = ["fake-llm", "--port", str(llm_port), "--behaviours", args.behaviours]
        children.append(nexus("fake-llm", fake, env, tmp / "fake.out").start())
        serve = ["serve", "--data-dir", str(tmp / "data"), "--http-port", str(http_port), "--no-dispatcher"]
        children.append(nexus("gateway", serve, {**env, "NEXUS_LOG_LEVEL": "WARNING"}, tmp / "serve.out").start())
        await wait_ready(children[0], f"http://127.0.0.1:{llm_port}/healthz", 30)
        gateway = f"http://127.0.0.1:{http_port}"
        await wait_ready(children[1], gateway + "/readyz", 60)
        settings = LlmSettings(base_url=f"http://127.0.0.1:{llm_port}/v1", model="nexus-fake-1")
        for concurrency in args.concurrency:
            cpu0 = time.process_time()
            report = await run_llm_agent(
                settings,
                orders=args.plans,
                seed=f"bench-{concurrency}-{time.time_ns()}",
                concurrency=concurrency,
                gateway=ClientConfig(gateway_url=gateway, max_connections=max(64, concurrency)),
            )
            cpu = time.process_time() - cpu0
            s = report["summary"]
            assert report["complete"], report["error"]
            row = {
                "concurrency": concurrency,
                "plans": s["plans"],
                "applied": s["applied"],
                "elapsed_s": report["elapsed_s"],
                "steps_per_s": s["steps_per_s"],
                "requests_per_applied_step": round(s["requests"] / s["applied"], 2),
                "tokens_per_applied_step": s["tokens_per_applied_step"],
                "planner_cpu_ms_per_applied_step": round(cpu * 1000 / s["applied"], 2),
                "load_average": os.getloadavg()[0],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for child in reversed(children):
            child.stop(15.0)
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=40)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--behaviours", default="correct", help="the fake's script (comma-separated)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = asyncio.run(measure(args))
    if args.json is not None:
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.platform()}
        args.json.write_text(json.dumps({**meta, "behaviours": args.behaviours, "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
