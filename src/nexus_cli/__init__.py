"""The `nexus` command: the gateway's commands and the lab's, in one table. Only this package knows both;
the gateway (`nexus`) holds no reference to the lab."""

from __future__ import annotations

import importlib.util
import sys

from nexus.cli import GATEWAY_COMMANDS, split_common_flags
from nexus.cli import main as route

# name -> (module, one-line help), in the order `nexus --help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": GATEWAY_COMMANDS["serve"],
    "migrate": GATEWAY_COMMANDS["migrate"],
    "demo": ("nexus_lab.demo", "start the embedded stack, send misbehaving plans, show what the gateway decided"),
    "agent": ("nexus_lab.agent_cli", "run the LangGraph agent: generate plans and publish their steps"),
    "sink": ("nexus_lab.sink", "run a webhook receiver that verifies, records and injects faults"),
    "check": ("nexus_lab.check_cli", "check an agent report against PostgreSQL and the sink's log"),
    "chaos": ("nexus_lab.chaos", "run chaos scenarios on real processes and check the invariants"),
    "soak": (
        "nexus_lab.soak",
        "run the whole stack for N minutes under every chaos fault in turn, check, measure drift",
    ),
    "bench": ("nexus_lab.bench", "measure throughput and latency"),
    "fake-llm": ("nexus_lab.llm.fake", "serve a scripted fake model over the Chat Completions protocol"),
    "services": ("nexus_lab.services", "serve fake inventory, payment, shipping and invoice services with ledgers"),
    "dlq": GATEWAY_COMMANDS["dlq"],
    "subscriptions": GATEWAY_COMMANDS["subscriptions"],
    "processes": GATEWAY_COMMANDS["processes"],
    "tenants": GATEWAY_COMMANDS["tenants"],
    "audit": GATEWAY_COMMANDS["audit"],
    "report": GATEWAY_COMMANDS["report"],
    "keys": GATEWAY_COMMANDS["keys"],
    "sagas": GATEWAY_COMMANDS["sagas"],
    "orders": GATEWAY_COMMANDS["orders"],
    "approvals": GATEWAY_COMMANDS["approvals"],
    "db": GATEWAY_COMMANDS["db"],
    "mcp": ("nexus_cli.mcp", "serve the gateway's MCP tools on stdio for a desktop client (calls the REST API)"),
}


# The lab's commands (modules of nexus_lab) need the `lab` extra; these are the modules it brings.
LAB_EXTRA = "nexus-event-gateway[lab]"
LAB_MODULES = ("nexus_client", "langgraph", "openai", "standardwebhooks")


def lab_missing() -> list[str]:
    """The lab extra's modules that are not installed (looked up, not imported)."""
    return [name for name in LAB_MODULES if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rest, _ = split_common_flags(argv)
    name = rest[0] if rest else ""
    if COMMANDS.get(name, ("", ""))[0].startswith("nexus_lab."):
        missing = lab_missing()
        if missing:
            print(
                f"nexus {name}: a lab command, and the lab is not installed (no {', '.join(missing)}):"
                f" pip install '{LAB_EXTRA}'",
                file=sys.stderr,
            )
            return 2
    return route(argv, COMMANDS)


__all__ = ["COMMANDS", "LAB_EXTRA", "main"]

if __name__ == "__main__":
    sys.exit(main())
