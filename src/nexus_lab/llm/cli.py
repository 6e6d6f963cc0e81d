"""`nexus agent --planner llm`: the LLM planner's half of `nexus agent` (flags, run, report, summary)."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
from collections.abc import Mapping

from nexus_client import ClientConfig
from nexus_lab.agent.runner import exit_status, write_report
from nexus_lab.llm import runner
from nexus_lab.llm import settings as llm_settings


def configure(parser: argparse.ArgumentParser) -> None:
    llm_settings.configure(parser)


async def _main(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    try:
        settings = llm_settings.from_args(args, env)
    except ValueError as exc:
        print(f"nexus agent: {exc}", file=sys.stderr)
        return 2
    if args.transport != "http":
        print("nexus agent: the LLM planner publishes over HTTP (the SDK's client)", file=sys.stderr)
        return 2
    seed = args.seed or secrets.token_hex(4)
    report = await runner.run_llm_agent(
        settings,
        orders=args.orders,
        seed=seed,
        concurrency=args.concurrency,
        gateway=ClientConfig.from_env(env, gateway_url=args.gateway_url),
    )
    if args.report is not None:
        write_report(report, args.report)
    s = report["summary"]
    if report["error"] and not s["plans"]:
        return exit_status(report)
    rejected = ", ".join(f"{k} {v}" for k, v in s["rejections"].items()) or "none"
    print(
        f"agent (llm {settings.model}): {s['plans']} plans (seed {seed}): {s['completed']} completed, "
        f"{s['aborted']} aborted ({s['give_ups']} given up); {s['proposals']} proposals, {s['applied']} applied, "
        f"{s['duplicates']} duplicates, rejected: {rejected}; {s['requests']} model requests, {s['tokens']} tokens"
    )
    return exit_status(report)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args, os.environ))
