"""Routing of a command line to a subcommand module, and the gateway's own commands.

Each subcommand lives in a module exposing `configure(parser)` and `run(args) -> int` (or
`configure_<name>` / `run_<name>`). The full `nexus` command (gateway and lab) is assembled outside this
package, from `GATEWAY_COMMANDS` and its own table; `python -m nexus.cli` runs the
gateway's commands alone.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping

from nexus.errors import ConfigurationError

# name -> (module, one-line help)
Commands = Mapping[str, tuple[str, str]]

GATEWAY_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("nexus.commands", "run the gateway: HTTP API, dispatcher, optional Kafka consumer"),
    "migrate": ("nexus.commands", "apply the database migrations and exit"),
    "dlq": ("nexus.dlq", "list and redrive dead letters"),
    "subscriptions": ("nexus.delivery.cli", "manage webhook subscriptions"),
    # issue 12
    "processes": ("nexus.processes.cli", "list, show and check process definitions"),
    "tenants": ("nexus.processes.cli", "per-tenant limits (set-limit, list)"),
    "audit": ("nexus.audit.cli", "verify, checkpoint and export the hash-chained decision log"),
    "report": ("nexus.audit.cli", "reports from the decision log: `nexus report blocked`"),
    "keys": ("nexus.auth.cli", "create, list and revoke API keys"),
    # issue 14
    "sagas": ("nexus.saga.cli", "list sagas by status, show one, redrive an escalated or failed one"),
    # issue 13 (lc2)
    "orders": ("nexus.lifecycle.cli", "an order's timeline from the decision log: `nexus orders show ID`"),
    "approvals": ("nexus.lifecycle.cli", "steps held for approval: list, approve, deny"),
}


class CommandUnavailable(SystemExit):
    """A subcommand's module failed to import or lacks `configure`/`run`: said aloud, never skipped."""


def build_parser(commands: Commands, only: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the module of `only` is imported (the agent's pulls in LangGraph, ~0.4 s), so
    `nexus serve` and the rest start fast. The others appear in `--help` by name and help text."""
    parser = argparse.ArgumentParser(prog="nexus", description="Nexus Event Gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in commands.items():
        if name != only:
            sub.add_parser(name, help=help_text)
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise CommandUnavailable(
                f"nexus {name}: cannot import module {module_name}: {type(exc).__name__}: {exc}"
            ) from exc
        configure = getattr(module, f"configure_{name}", None) or getattr(module, "configure", None)
        runner = getattr(module, f"run_{name}", None) or getattr(module, "run", None)
        if configure is None or runner is None:
            raise CommandUnavailable(f"nexus {name}: module {module_name} has no configure()/run()")
        command = sub.add_parser(name, help=help_text, description=help_text)
        configure(command)
        command.set_defaults(_run=runner)
    return parser


def main(argv: list[str] | None = None, commands: Commands = GATEWAY_COMMANDS) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(commands, argv[0] if argv and argv[0] in commands else None).parse_args(argv)
    try:
        code: int = args._run(args)
    except KeyboardInterrupt:
        return 130
    except ConfigurationError as exc:
        # A bad setting is the operator's to fix: say which, without a traceback (argparse's exit code).
        print(f"nexus {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
