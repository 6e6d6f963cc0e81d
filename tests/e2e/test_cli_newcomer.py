"""The `nexus` command as a newcomer meets it: common flags anywhere, read and admin commands that never
create a database, process definitions read from their files, empty lists and defaulted tenants said
aloud, help texts without issue numbers, and the scripted agent with any tenant's key."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.cli import build_parser, split_common_flags
from nexus.processes import register
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_cli import COMMANDS
from tests.conftest import ROOT, settings_env

pytestmark = pytest.mark.slow


def nexus(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`nexus ARGS` run in `cwd`, with no NEXUS_* variable but those of `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    base["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run(
        [sys.executable, "-m", "nexus_cli", *args],
        env={**base, **(env or {})}, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_common_flags_are_taken_from_anywhere_on_the_line() -> None:
    """--data-dir, --database-url and --log-level, before or after the command, as `--f v` or `--f=v`."""
    rest, found = split_common_flags(
        ["--data-dir", "/a", "processes", "--log-level=DEBUG", "list", "--database-url", "postgresql://x", "--json"]
    )
    assert rest == ["processes", "list", "--json"]
    assert found == {"data_dir": "/a", "log_level": "DEBUG", "database_url": "postgresql://x"}
    assert split_common_flags(["sink", "--", "--data-dir", "x"])[0] == ["sink", "--", "--data-dir", "x"]


@pytest.mark.parametrize(
    "line",
    [
        ["--data-dir", "{d}", "keys", "list"],
        ["keys", "--data-dir", "{d}", "list"],
        ["keys", "list", "--data-dir={d}"],
        ["dlq", "list", "--data-dir", "{d}"],
        ["--data-dir", "{d}", "approvals", "list"],
        ["orders", "show", "o-1", "--data-dir", "{d}"],
        ["audit", "verify", "--data-dir", "{d}"],
        ["--log-level", "WARNING", "keys", "create", "--tenant", "acme", "--role", "agent", "--data-dir", "{d}"],
    ],
)
def test_read_and_admin_commands_never_create_a_database(tmp_path: Path, line: list[str]) -> None:
    """Where no database exists, each says in one line which path it looked at and how to get one, exits 1,
    and leaves no data directory behind (neither the one named nor ./.nexus)."""
    data = tmp_path / "nowhere"
    done = nexus([part.format(d=data) for part in line], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(data / "pgdata") in lines[0] and "nexus serve" in lines[0] and "--data-dir" in lines[0]
    assert not data.exists() and not (tmp_path / ".nexus").exists()


def test_the_default_data_dir_is_named_too(tmp_path: Path) -> None:
    """With no flag, the line names ./.nexus/pgdata, and NEXUS_DATA_DIR is honoured the same way."""
    done = nexus(["keys", "list"], tmp_path)
    assert str(tmp_path / ".nexus" / "pgdata") in done.stderr and done.returncode == 1
    done = nexus(["keys", "list"], tmp_path, {"NEXUS_DATA_DIR": str(tmp_path / "env-dir")})
    assert str(tmp_path / "env-dir" / "pgdata") in done.stderr
    assert not (tmp_path / ".nexus").exists() and not (tmp_path / "env-dir").exists()


def test_processes_read_the_definition_files_without_a_database(tmp_path: Path) -> None:
    """`processes list`, `show --mermaid` and `check` need only YAML: they work and create nothing."""
    listed = nexus(["processes", "list"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert {"order", "fulfilment", "refund"} <= {line.split()[0] for line in listed.stdout.splitlines()}
    shown = nexus(["processes", "show", "order", "--mermaid", "--data-dir", str(tmp_path / "d")], tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("stateDiagram-v2"), shown.stderr
    own = tmp_path / "mine.yaml"
    own.write_text((ROOT / "src/nexus/processes/order.yaml").read_text())
    assert nexus(["processes", "check", str(own)], tmp_path).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.yaml"]


async def test_processes_list_adds_the_versions_pinned_in_an_existing_database(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    """A version registered from a folder that is gone is still listed (marked pinned), read from the database
    without registering anything."""
    folder = tmp_path / "defs"
    folder.mkdir()
    text = (ROOT / "src/nexus/processes/order.yaml").read_text().replace("name: order", "name: old_flow", 1)
    (folder / "old.yaml").write_text(text)
    await register(db, folder)
    before = await db.fetchval("SELECT count(*) FROM processes")
    env = settings_env(settings)
    env.pop("NEXUS_PROCESS_DIR", None)
    listed = nexus(["processes", "list"], tmp_path, env)
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("old_flow"))
    assert "pinned in the database" in line
    assert await db.fetchval("SELECT count(*) FROM processes") == before


def test_empty_lists_and_defaulted_tenants_are_said_aloud(settings: Settings, tmp_path: Path) -> None:
    """`approvals list` with none pending says so; `orders show` of an unknown order names the tenant it
    looked in when --tenant was not given (and not when it was)."""
    env = settings_env(settings)
    done = nexus(["approvals", "list"], tmp_path, env)
    assert (done.returncode, done.stdout.strip()) == (0, "no pending approvals"), done.stderr
    missing = nexus(["orders", "show", "nope"], tmp_path, env)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stdout
    assert "tenant 'default', the default" in missing.stdout and "--tenant" in missing.stdout
    named = nexus(["orders", "show", "nope", "--tenant", "acme"], tmp_path, env)
    assert named.returncode == 1 and "the default" not in named.stdout


def _help_texts(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[list[str], str]]:
    yield path, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _help_texts(sub, [*path, name])


def test_no_help_text_carries_an_issue_number() -> None:
    """Every command's and subcommand's --help reads without "issue N" notes."""
    for name in COMMANDS:
        for path, text in _help_texts(build_parser(COMMANDS, name), [name]):
            assert not re.search(r"\bissue\s*\d+", text, re.IGNORECASE), (path, text)


async def test_the_scripted_agent_works_with_any_tenants_key(start_gateway: Any, db: Database, tmp_path: Path) -> None:
    """`nexus agent` with an agent key of tenant acme: every plan completes, under acme (no TENANT_MISMATCH)."""
    _, base = start_gateway("--no-dispatcher")
    _, key = await create_key(db, "acme", frozenset({Role.AGENT}))
    report = tmp_path / "report.json"
    done = nexus(
        ["agent", "--orders", "3", "--seed", "acme", "--gateway-url", base, "--report", str(report)],
        tmp_path, {"NEXUS_API_KEY": key},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(report.read_text())["complete"]
    tenants = await db.fetch("SELECT DISTINCT tenant_id FROM orders")
    assert [r["tenant_id"] for r in tenants] == ["acme"]
