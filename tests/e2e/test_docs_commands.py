"""Every command block of README.md and docs/*.md runs as a newcomer would run it, on real processes.

A command block is a fenced block marked `sh`, `bash` or `console` (or an unmarked one whose every line
starts with a command). Each runs as one bash script (`set -euo pipefail`) in a fresh directory with a
fresh database, after these mechanical changes only:

- placeholders filled (`ORDER_ID`, `APPROVAL_ID`, `$KEY`...: an order, a held approval and keys that exist);
- the documented ports (8080, 9000, 8765, 8090) moved to free ones, `postgresql://...` to the test database;
- long runs reduced (`--orders N` -> at most 3) and `make` targets replaced by their recipe's command;
- a long-running server (`nexus serve`, `sink`, `fake-llm`, `services`) started in the background and
  waited for, a server stream cut after 2 s; a block that talks to the API without starting a gateway
  gets one (as the reader has from "Running it");
- `curl -s` fails on an HTTP error (`--fail-with-body`), so an error answer fails the block;
- a here-document's body (a file the block writes, e.g. a process definition) is kept verbatim.

Lines that cannot run here are listed in `CANNOT_RUN` with the reason. A desktop client's configuration
(JSON) is not a command block.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.ingress.tenants import bind
from nexus.processes import register
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, TEST_API_KEY, free_port
from tests.factories import plan_json, step_json

pytestmark = pytest.mark.slow

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_LANGS = {"sh", "bash", "console", "shell"}
COMMAND_WORDS = ("nexus ", "make ", "curl ", "export ", ".venv/bin/", "KEY=", "NEXUS_", "OTEL_", "python ")

# A line starting with one of these cannot run in this test; the reason says why (and where it runs).
CANNOT_RUN: dict[str, str] = {
    "make check": "lint, types and the unit tests, which `make test` runs too (this test is one of its e2e tests)",
    "make test": "runs this test itself (and every other one); .ci/run runs it",
    "make chaos": "minutes of processes killed at CI size; `make test` runs a short version of each scenario",
    "make fuzz": "the long fuzz run; `make test` runs the short one (tests/integration/test_fuzz.py)",
    "make bench": "minutes of load on a 2-core machine; tests/e2e/test_bench_smoke.py runs each scenario small",
    "wrk ": "a native load generator run for minutes; the bench's smoke test runs it briefly",
    "sudo ": "changes the reader's machine (a user, /etc, systemd); tests/unit/test_deploy_files.py checks the unit "
    "and its environment file",
    "nexus db standby ": "copies and runs a replica of the reader's primary (a second server); "
    "tests/integration/test_standby.py makes one from an embedded primary, promotes it and fails over to it",
    "nexus db promote ": "promotes the reader's standby; tests/integration/test_standby.py promotes one",
    "pg_dump ": "dumps the reader's own server; tests/e2e/test_deploy.py performs the whole backup and restore",
    "createdb ": "creates a database on the reader's new server; tests/e2e/test_deploy.py restores into a fresh one",
    "pg_restore ": "restores into the reader's new server; tests/e2e/test_deploy.py restores into a fresh one",
    'cp -p "${NEXUS_DATA_DIR': "copies the reader's signing key; tests/e2e/test_deploy.py copies it to a new data dir",
    "install -m 0600 backup/": "puts a backed-up key in place; tests/e2e/test_deploy.py does so in a new data dir",
    "pip install ": "installs into the reader's environment, from the repository's root; tests/e2e/test_examples.py "
    "installs the SDK so in a clean venv and runs an example agent with it",
}

# `make` targets a block shows, as the command their recipe runs (the venv's install step aside).
MAKE_RECIPES = {
    "make demo-llm": f"{sys.executable} -m nexus_lab.llm.demo --orders 3",
    "make demo-mcp": f"{sys.executable} -m nexus_lab.mcp_demo",
    "make demo": "nexus demo",
}

# Example values a doc shows that name rows of the reader's own database, as this one holds them.
FILLS = {
    "nexus keys revoke 7": "nexus keys revoke 2",  # the test database holds key 1; the block creates key 2
}

SERVERS = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?nexus (serve|sink|fake-llm|services)\b")


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"


def command_blocks() -> Iterator[Block]:
    """The command blocks of the docs, with the line their fence opens on."""
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            fence = re.match(r"^```(\w*)\s*$", lines[i])
            if not fence:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body = lines[i + 1 : end]
            commands = [x for x in body if x.strip() and not x.startswith((" ", "#"))]
            lang = fence.group(1)
            bare_commands = not lang and commands and all(x.startswith(COMMAND_WORDS) for x in commands)
            sdk_example = lang == "python" and "nexus_client" in "\n".join(body)
            if lang in COMMAND_LANGS or bare_commands or sdk_example:
                yield Block(path, i + 1, "\n".join(body))
            i = end + 1


@dataclasses.dataclass
class Stage:
    """Where a block runs: its directory, ports, database, keys and the rows its placeholders name."""

    cwd: Path
    env: dict[str, str]
    ports: dict[str, int]
    order_id: str
    approval_id: str

    @property
    def http(self) -> int:
        return self.ports["8080"]


_HEREDOC = re.compile(r"<<-?\s*'?([A-Za-z_]+)'?")


def logical_lines(text: str) -> list[str]:
    """Lines with their backslash continuations joined; comments and blank lines dropped. A here-document
    (`cat > f <<'YAML'`) stays one logical line, its body and terminator kept verbatim after a newline."""
    out: list[str] = []
    pending = ""
    heredoc: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if heredoc is not None:
            out[-1] += "\n" + raw
            heredoc = None if line == heredoc else heredoc
            continue
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line)
            opened = _HEREDOC.search(line)
            heredoc = opened.group(1) if opened else None
    return out


def strip_comment(line: str) -> str:
    """The line without its trailing `# comment` (a `#` after a blank, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i > 0 and line[i - 1] in " \t":
            return line[:i].rstrip()
    return line


def reduce_flags(line: str) -> str:
    # A run with hostile modes keeps enough plans for `nexus check` to see each mode at least once.
    cap = 25 if "--hostile-rate" in line else 3
    line = re.sub(r"--orders (\d+)", lambda m: f"--orders {min(int(m.group(1)), cap)}", line)
    line = re.sub(r"--plans (\d+)", lambda m: f"--plans {min(int(m.group(1)), 3)}", line)
    # `[--flag VALUE]`: an optional part of a synopsis, left out.
    return re.sub(r"\s*\[--?[a-z][^\]]*\]", "", line)


def fill(line: str, stage: Stage) -> str:
    for example, value in FILLS.items():
        line = line.replace(example, value)
    for port, free in stage.ports.items():
        line = re.sub(rf"(?<![\d.]){port}(?!\d)", str(free), line)
    line = line.replace("postgresql://...", stage.env["NEXUS_DATABASE_URL"])
    line = line.replace("APPROVAL_ID", stage.approval_id).replace("ORDER_ID", stage.order_id)
    line = line.replace("curl -sN ", "curl -sSN --max-time 2 ")
    return line.replace("curl -s ", "curl -sS --fail-with-body ")


def script_of(block: Block, stage: Stage, used: set[str]) -> str:
    """The bash script a block becomes (see the module's docstring)."""
    lines: list[str] = []
    started_gateway = False
    for logical in logical_lines(block.text):
        first, newline, heredoc = logical.partition("\n")
        line = strip_comment(first).strip() + newline + heredoc
        if not line:
            continue
        skipped = next((prefix for prefix in CANNOT_RUN if line.startswith(prefix)), None)
        if skipped is not None:
            used.add(skipped)
            lines.append(f"# cannot run here ({CANNOT_RUN[skipped]}): {line}")
            continue
        for target, recipe in MAKE_RECIPES.items():
            if line == target or line.startswith(target + " "):
                line = recipe + line[len(target) :]
                break
        line = fill(reduce_flags(line), stage)
        if line.endswith("--stream") or "curl -sSN" in line:
            lines.append(f"{line} || [ $? -eq 28 ]  # a stream: cut after 2 s")
            continue
        server = SERVERS.match(line.removesuffix("&").strip())
        if server:
            kind = server.group(1)
            command = line.removesuffix("&").strip()
            ready = _ready_url(kind, command, stage)
            lines.append(f'stop_server {kind}; {command} > "server-{kind}.log" 2>&1 & servers[{kind}]=$!')
            lines.append(f'wait_ready "{ready}" {kind}')
            started_gateway = started_gateway or kind == "serve"
            continue
        lines.append(line)
    body = "\n".join(lines)
    needs_gateway = not started_gateway and (
        f":{stage.http}" in body or "nexus agent" in body or "NexusClient" in body or "ClientConfig" in body
    )
    preamble = _PREAMBLE
    if needs_gateway:
        preamble += "nexus serve > server-gateway.log 2>&1 & servers[gateway]=$!\n"
        preamble += f'wait_ready "http://127.0.0.1:{stage.http}/readyz" gateway\n'
    if block.path.suffix == ".md" and block.text.lstrip().startswith(("from ", "import ")):
        return preamble + f"{sys.executable} - <<'PYTHON'\n{block.text}\nPYTHON\n"
    return preamble + body + "\n"


def _ready_url(kind: str, command: str, stage: Stage) -> str:
    if kind == "serve":
        port = re.search(r"--http-port (\d+)", command)
        return f"http://127.0.0.1:{port.group(1) if port else stage.http}/readyz"
    port = re.search(r"--port (\d+)", command)
    assert port, f"a `nexus {kind}` without --port: {command}"
    return f"http://127.0.0.1:{port.group(1)}/healthz"


_PREAMBLE = """set -euo pipefail
declare -A servers=()
stop_server() {
  if [ -n "${servers[$1]:-}" ]; then
    kill "${servers[$1]}" 2>/dev/null || true; wait "${servers[$1]}" 2>/dev/null || true; unset "servers[$1]"
  fi
}
cleanup() { for k in "${!servers[@]}"; do kill "${servers[$k]}" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_ready() {
  for _ in $(seq 1 600); do
    if curl -s -o /dev/null --max-time 1 "$1"; then return 0; fi
    if ! kill -0 "${servers[$2]}" 2>/dev/null; then
      echo "$2 exited:"; cat "server-$2.log" 2>/dev/null || true; return 1
    fi
    sleep 0.1
  done
  echo "$2 not ready: $1"; return 1
}
"""


@pytest.fixture
async def stage(database_url: str, settings: Settings, tmp_path: Path) -> Stage:
    """A directory with `nexus` on PATH (and `.venv/bin/nexus`, as after `make`), a fresh database holding
    an order at seq 3, a held approval, and the tests' all-roles key as `$KEY` and `$APPROVER_KEY`."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "nexus"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nexus_cli "$@"\n')
    wrapper.chmod(0o755)
    ports = {p: free_port() for p in ("8080", "9000", "8765", "8090")}
    db = await Database(settings).open(migrate=False)
    try:
        catalog = await register(db, None)
        gateway = Gateway(db, catalog=catalog)
        items = [bind(Incoming.parse(e), "default") for e in plan_json("docs-order-1", "docs-plan-1", 3)]
        held = [bind(Incoming.parse(_reviewed(s)), "default") for s in (1, 2, 3)]
        await gateway.submit([i for i in items if i is not None])
        outcomes = await gateway.submit([i for i in held if i is not None])
        approval_id = str(outcomes[-1].approval_id)
    finally:
        await db.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_", "OTEL_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT / "src"),
        NEXUS_DATABASE_URL=database_url,
        NEXUS_HTTP_PORT=str(ports["8080"]),
        NEXUS_GATEWAY_URL=f"http://127.0.0.1:{ports['8080']}",
        NEXUS_API_KEY=TEST_API_KEY,
        KEY=TEST_API_KEY,
        APPROVER_KEY=TEST_API_KEY,
        NEXUS_KAFKA_TOPIC=f"docs-{tmp_path.name}",
        NEXUS_KAFKA_DLQ_TOPIC=f"docs-{tmp_path.name}.dlq",
        NEXUS_KAFKA_GROUP=f"docs-{tmp_path.name}",
        NEXUS_LOG_LEVEL="WARNING",
    )
    assert approval_id != "None"
    return Stage(tmp_path, env, ports, "docs-order-1", approval_id)


def _reviewed(seq: int) -> dict[str, Any]:
    """A step of an `order_reviewed` order whose payment (seq 3) is above the approval threshold."""
    body = step_json("docs-held-1", "docs-plan-2", seq, process="order_reviewed")
    if seq == 1:
        body["data"]["items"] = [{"product_id": "p", "quantity": 1, "unit_price": 1500}]
        body["data"]["total_amount"] = 1500
    if seq == 3:
        body["data"]["amount"] = 1500
    return body


BLOCKS = list(command_blocks())
USED: set[str] = set()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_a_documented_command_block_runs(block: Block, stage: Stage) -> None:
    """The block, as a bash script with its placeholders filled and its runs reduced, exits 0."""
    script = script_of(block, stage, USED)
    (stage.cwd / "block.sh").write_text(script)
    done = subprocess.run(
        ["bash", "block.sh"], cwd=stage.cwd, env=stage.env, capture_output=True, text=True, timeout=300, check=False
    )
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(stage.cwd.glob("server-*.log")))
    assert done.returncode == 0, (
        f"{block.id} failed:\n{script}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}{logs}"
    )
