"""The LLM planner end to end: `nexus agent --planner llm` -> real `nexus serve` (PostgreSQL) and a real
`nexus fake-llm` over HTTP -> `nexus check`. No internet: the fake speaks the Chat Completions protocol."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.settings import Settings
from nexus.store.database import Database
from nexus_client import ClientConfig
from nexus_lab.llm import behaviours as bh
from nexus_lab.llm.check import check_llm_report
from nexus_lab.llm.runner import plan_ids, run_llm_agent
from nexus_lab.llm.settings import LlmSettings
from tests.conftest import ROOT, TEST_API_KEY, NexusProcess, api_headers, free_port, settings_env, wait_http

pytestmark = pytest.mark.slow

LLM_KEY = "sk-e2e-llm-key-never-shown-0001"
GATEWAY_KEY = TEST_API_KEY  # in every test database (tests/conftest.py)
WEBHOOK_SECRET = "whsec_ZTJlLXdlYmhvb2stc2VjcmV0LW5ldmVyLXNob3du"  # noqa: S105 - a test value that must not leak


class Fake:
    """A running `nexus fake-llm` and its request log."""

    def __init__(self, procs: list[NexusProcess], tmp: Path, *args: str) -> None:
        self.port = free_port()
        self.log = tmp / f"fake-{self.port}.jsonl"
        argv = ["fake-llm", "--port", str(self.port), "--log", str(self.log), *args]
        self.proc = NexusProcess(argv, dict(os.environ), tmp / f"fake-{self.port}.out").start()
        procs.append(self.proc)
        wait_http(f"http://127.0.0.1:{self.port}/healthz", proc=self.proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def agent_env(fake: Fake, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    env.update(
        NEXUS_LLM_BASE_URL=fake.url,
        NEXUS_LLM_MODEL="nexus-fake-1",
        NEXUS_LLM_API_KEY=LLM_KEY,
        NEXUS_API_KEY=GATEWAY_KEY,
        NEXUS_WEBHOOK_SECRET=WEBHOOK_SECRET,
        NEXUS_LLM_RETRY_BASE_MS="5",
        NEXUS_LLM_RETRY_MAX_MS="50",
    )
    env.update(extra)
    return env


def agent_args(gateway: str, report: Path, orders: int, seed: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "nexus_cli", "agent", "--planner", "llm", "--orders", str(orders), "--seed", seed,
        "--gateway-url", gateway, "--report", str(report), *extra,
    ]  # fmt: skip


def run_agent(env: dict[str, str], args: list[str]) -> dict[str, Any]:
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(Path(args[args.index("--report") + 1]).read_text())  # type: ignore[no-any-return]


def planner_settings(fake: Fake, **changes: Any) -> LlmSettings:
    base = LlmSettings(base_url=fake.url, model="nexus-fake-1", api_key=LLM_KEY, retry_base_ms=5, retry_max_ms=50)
    return base.replace(**changes)


async def run_in_process(fake: Fake, gateway: str, orders: int, seed: str, **changes: Any) -> dict[str, Any]:
    """The planner in this process (the CLI's path minus the interpreter start), against the real servers."""
    config = ClientConfig(gateway_url=gateway, api_key=GATEWAY_KEY)
    concurrency = int(changes.pop("concurrency", 1))
    report = await run_llm_agent(
        planner_settings(fake, **changes), orders=orders, seed=seed, concurrency=concurrency, gateway=config
    )
    assert report["complete"], report["error"]
    return report


async def check_in_process(report: dict[str, Any], settings: Settings) -> None:
    """`nexus check`'s LLM checks against the gateway's PostgreSQL: every invariant holds."""
    db = await Database(settings).open(migrate=False)
    try:
        result = await check_llm_report(report, db)
    finally:
        await db.close()
    assert result.ok, result.failures + [d for _, ok, d in result.run_checks if not ok]


def check(report: Path, settings: Settings) -> str:
    args = [sys.executable, "-m", "nexus_cli", "check", str(report)]
    done = subprocess.run(args, env=settings_env(settings), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def codes_of(plan: dict[str, Any]) -> list[str]:
    return sorted(s["code"] for s in plan["steps"] if s["decision"] == "REJECTED")


async def test_every_behaviour_ends_as_expected(start_gateway, nexus_procs, tmp_path: Path, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Ten plans, one per behaviour: each ends applied, rejected with the right code then corrected, or given
    up and aborted with planner_gave_up; the verdict goes back to the model after a rejection; an injected
    instruction changes neither the next request nor what is published; no secret reaches the model; and
    the checker proves the report's counts from PostgreSQL."""
    _, gateway = start_gateway("--no-dispatcher")
    fake = Fake(nexus_procs, tmp_path, "--behaviours", ",".join(bh.BEHAVIOURS))
    report = await run_in_process(fake, gateway, len(bh.BEHAVIOURS), "e2e", concurrency=5)
    requests = fake.requests()
    played = {r["order_key"]: r["behaviour"] for r in requests if r.get("behaviour")}
    by_behaviour = {played[p["order_id"]]: p for p in report["plans"]}
    assert set(by_behaviour) == set(bh.BEHAVIOURS)
    for behaviour, (status, codes, gave_up) in bh.EXPECTED.items():
        plan = by_behaviour[behaviour]
        assert (plan["status"], codes_of(plan), bool(plan["gave_up"])) == (status, sorted(codes), gave_up), behaviour
        if gave_up:
            abort = plan["steps"][-1]
            assert (abort["event_type"], abort["decision"]) == ("ABORT_PLAN", "APPLY")
            assert plan["corrections"] == 3 and plan["last_seq"] == 2
    assert report["summary"]["give_ups"] == 2 and report["summary"]["applied"] == 8 * 5 + 2 * 2

    # The verdict is fed back: the request after the wrong amount carries the gateway's REJECTED, its code,
    # check and message as the tool result of that very call.
    wrong = by_behaviour["wrong_amount"]["order_id"]
    mine = [r for r in requests if r.get("order_key") == wrong]
    after = next(r for r in mine if '"REJECTED"' in (r["body"]["messages"][-1].get("content") or ""))
    last, call = after["body"]["messages"][-1], after["body"]["messages"][-2]
    verdict = json.loads(last["content"])
    assert last["role"] == "tool" and last["tool_call_id"] == call["tool_calls"][0]["id"]
    assert (verdict["decision"], verdict["code"], verdict["check"]) == (
        "REJECTED", "CHECK_FAILED", "payment_amount_matches_order"
    )  # fmt: skip
    assert "amount must equal" in verdict["message"] and verdict["order"]["last_seq"] == 2

    # Injection: later requests have the system prompt and tools of an honest plan at the same state; the
    # injected text is only ever inside the tool-call arguments; the plan published its 5 steps and no more.
    honest = [r for r in requests if r.get("behaviour") == "correct"]
    injected = [r for r in requests if r.get("behaviour") == "prompt_injection"]
    assert len(injected) == len(honest) == 5
    for a, b in zip(injected, honest, strict=True):
        assert a["body"]["messages"][0] == b["body"]["messages"][0]
        assert [t["function"]["name"] for t in a["body"]["tools"]] == [
            t["function"]["name"] for t in b["body"]["tools"]
        ]
        for m in a["body"]["messages"]:
            outside_arguments = json.dumps({k: v for k, v in m.items() if k != "tool_calls"})
            assert "IGNORE ALL PREVIOUS" not in outside_arguments
    plan = by_behaviour["prompt_injection"]
    assert [s["decision"] for s in plan["steps"]] == ["APPLY"] * 5 and plan["status"] == "completed"

    log = fake.log.read_text()
    assert LLM_KEY not in log and GATEWAY_KEY not in log
    await check_in_process(report, settings)


async def test_storms_budgets_and_json_mode(  # type: ignore[no-untyped-def]
    start_gateway, nexus_procs, tmp_path: Path, settings: Settings
) -> None:
    """A storm of six 429s then six 500s: two plans still complete, in exactly the 22 requests the budget
    allows; a storm longer than a budget of 5 gives the plan up (planner_gave_up) instead of crashing; and
    against a server that refuses tools, streamed, the planner falls back to JSON mode and still corrects a
    wrong currency (CHECK_FAILED) and malformed JSON (MALFORMED_PROPOSAL)."""
    _, gateway = start_gateway("--no-dispatcher")
    fake = Fake(
        nexus_procs, tmp_path, "--behaviours", "correct", "--storm", "429:6", "--storm", "500:6", "--retry-after", "0"
    )
    report = await run_in_process(fake, gateway, 2, "storm", max_requests_per_run=22, retry_attempts=13)
    s = report["summary"]
    assert (s["completed"], s["requests"], s["rate_limited"], s["server_errors"]) == (2, 22, 6, 6)
    await check_in_process(report, settings)

    longer = Fake(nexus_procs, tmp_path, "--behaviours", "correct", "--storm", "429:50", "--retry-after", "0")
    report = await run_in_process(longer, gateway, 1, "spent", max_requests_per_run=5)
    [plan] = report["plans"]
    assert plan["gave_up"] == 1 and "budget of 5 spent" in plan["give_up_reason"] and plan["status"] == "aborted"
    assert report["summary"]["requests"] == 5 == len(longer.requests())
    await check_in_process(report, settings)

    plain = Fake(nexus_procs, tmp_path, "--behaviours", "wrong_currency,malformed_arguments", "--no-tools")
    report = await run_in_process(plain, gateway, 2, "json", stream=True)
    assert report["summary"]["json_mode"] is True and report["summary"]["completed"] == 2
    codes = collections.Counter(c for p in report["plans"] for c in codes_of(p))
    assert codes == {"CHECK_FAILED": 1, "MALFORMED_PROPOSAL": 1}
    streamed = [r["body"] for r in plain.requests() if r.get("behaviour")]
    assert all(b["stream"] and b["response_format"] == {"type": "json_object"} and "tools" not in b for b in streamed)
    await check_in_process(report, settings)


async def test_a_planner_killed_mid_plan_resumes_without_duplicating(  # type: ignore[no-untyped-def]
    start_gateway, nexus_procs, tmp_path: Path, settings: Settings
) -> None:
    """`nexus agent --planner llm` SIGKILLed once two steps are applied, restarted with the same seed: its
    first step is answered DUPLICATE, which it takes as done (it moves to the order's position, not a
    failure), and it finishes: one outbox row per step, five in all (`nexus check` holds); no secret of its
    environment (LLM key, gateway key, webhook secret) ever reached the model."""
    _, gateway = start_gateway("--no-dispatcher")
    fake = Fake(nexus_procs, tmp_path, "--behaviours", "wrong_amount", "--delay-ms", "150")
    env = agent_env(fake)
    args = agent_args(gateway, tmp_path / "resume.json", 1, "resume")
    order_id, _ = plan_ids("resume", 0)
    first = subprocess.Popen(args, env=env, cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            r = httpx.get(f"{gateway}/v1/orders/{order_id}", headers=api_headers(), timeout=5)
            if r.status_code == 200 and r.json()["last_seq"] >= 2:
                break
            assert first.poll() is None and time.monotonic() < deadline, "the planner ended or stalled"
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    killed_at = httpx.get(f"{gateway}/v1/orders/{order_id}", headers=api_headers(), timeout=5).json()["last_seq"]
    assert 2 <= killed_at < 5
    report = run_agent(env, args)
    [plan] = report["plans"]
    decisions = [s["decision"] for s in plan["steps"]]
    assert decisions[0] == "DUPLICATE" and plan["duplicates"] == 1 and plan["steps"][0]["event_type"] == "OrderCreated"
    assert plan["status"] == "completed" and plan["applied"] == 5 - killed_at and not plan["gave_up"]
    assert decisions.count("APPLY") == 5 - killed_at
    order = httpx.get(f"{gateway}/v1/orders/{order_id}", headers=api_headers(), timeout=5).json()
    assert (order["status"], order["last_seq"], order["notifications"]) == ("completed", 5, 5)
    assert "all invariants held" in check(tmp_path / "resume.json", settings)
    log = fake.log.read_text()
    for secret in (LLM_KEY, GATEWAY_KEY, WEBHOOK_SECRET):
        assert secret not in log
