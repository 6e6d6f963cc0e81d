"""`nexus check REPORT` for an LLM planner's report: its counts proven from PostgreSQL (read-only).

The decision log (hash-chained, every decision a row) is not on this branch; what the gateway keeps of
each decision here is the order row, its outbox (one row per applied step, with the envelope) and
`rejected_events` (one row per REJECTED event_id, with code and check). So, per plan:

- `order`: the order's status and last_seq are the report's;
- `applied`: every step the report says was applied is in the order's outbox, and the outbox holds as
  many rows as the report's final state implies (last_seq, plus the abort); no rejected step is in it;
- `rejected`: every step the report says the gateway REJECTED is in `rejected_events` with the same code
  and check (a step resent unchanged is one event, one row, answered alike each time), and (unless the
  plan resumed a killed run: DUPLICATE answers) the order has no rejected row the report does not name,
  so the report's rejections by code are the gateway's;
- `gave_up`: a plan the report gave up on ends aborted by an ABORT_PLAN whose abort_code is
  `planner_gave_up` (or, with no step applied, a tombstone); a plan not given up has no such abort;

and for the run: the report is complete, and its summary's counts are the sums of its plans'.
"""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from nexus.store.database import Database
from nexus_lab.checker import CheckResult

CHECKS: dict[str, str] = {
    "order": "order status and last_seq as reported",
    "applied": "applied steps in the outbox, as many as the final state implies",
    "rejected": "reported rejections are the gateway's rejected_events, by code and check",
    "gave_up": "given-up plans aborted with planner_gave_up, and only they",
}
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@functools.cache
def _queries() -> dict[str, str]:
    text = resources.files("nexus_lab.llm").joinpath("check.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _gateway_steps(plan: Mapping[str, Any], decision: str) -> list[Mapping[str, Any]]:
    return [s for s in plan["steps"] if s.get("source") != "planner" and s["decision"] == decision]


def check_order(plan: Mapping[str, Any], row: Mapping[str, Any] | None) -> list[str]:
    if row is None:
        return [] if plan["status"] is None else ["the gateway has no such order"]
    problems = []
    if row["status"] != plan["status"]:
        problems.append(f"status {row['status']}, the report says {plan['status']}")
    if row["last_seq"] != plan["last_seq"]:
        problems.append(f"last_seq {row['last_seq']}, the report says {plan['last_seq']}")
    if row["plan_id"] not in (None, plan["plan_id"]):
        problems.append(f"plan_id {row['plan_id']}")
    return problems


def check_applied(plan: Mapping[str, Any], outbox: Sequence[Mapping[str, Any]]) -> list[str]:
    ids = {r["event_id"] for r in outbox}
    problems = [
        f"applied step {s['event_type']} {s['event_id']} is not in the outbox"
        for s in plan["steps"]
        if s["decision"] == "APPLY" and s["event_id"] not in ids
    ]
    problems += [
        f"rejected step {s['event_id']} is in the outbox"
        for s in plan["steps"]
        if s["decision"] == "REJECTED" and s["event_id"] in ids
    ]
    aborted_live = plan["status"] == "aborted" and plan["last_seq"] > 0
    expected = plan["last_seq"] + (1 if aborted_live else 0)
    if len(outbox) != expected:
        problems.append(f"{len(outbox)} outbox rows, the final state implies {expected}")
    return problems


def check_rejected(plan: Mapping[str, Any], rejected: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = {r["event_id"]: r for r in rejected}
    reported = _gateway_steps(plan, "REJECTED")
    problems = []
    for s in reported:
        row = rows.get(s["event_id"])
        if row is None:
            problems.append(f"REJECTED {s['event_type']} {s['event_id']} ({s['code']}) is not in rejected_events")
        elif (row["code"], row["check_id"]) != (s["code"], s.get("check")):
            problems.append(f"{s['event_id']}: gateway says {row['code']}/{row['check_id']}, report {s['code']}")
    unknown = set(rows) - {s["event_id"] for s in reported}
    # A resumed plan (DUPLICATE answers) may have had rejections in the run that was killed.
    if unknown and plan["duplicates"] == 0:
        problems.append(f"{len(unknown)} rejected_events rows the report does not name: {sorted(unknown)[:3]}")
    # Verdicts by code are the report's counts; a step resent unchanged has the same event_id and is
    # answered from its one rejected_events row, so the rows match the distinct event_ids.
    counted = collections.Counter(s["code"] for s in reported)
    if dict(counted) != dict(plan["rejections"]):
        problems.append(f"rejections by code {plan['rejections']} but the steps say {dict(counted)}")
    distinct = collections.Counter({s["event_id"]: s["code"] for s in reported}.values())
    stored = collections.Counter(r["code"] for r in rejected)
    if plan["duplicates"] == 0 and stored != distinct:
        problems.append(f"the gateway rejected {dict(stored)} (distinct events), the report {dict(distinct)}")
    return problems


def check_gave_up(
    plan: Mapping[str, Any], row: Mapping[str, Any] | None, outbox: Sequence[Mapping[str, Any]]
) -> list[str]:
    gave_up_rows = [r for r in outbox if r["event_type"] == "ABORT_PLAN" and r["abort_code"] == "planner_gave_up"]
    if not plan["gave_up"]:
        return ["aborted with planner_gave_up but the report did not give up"] if gave_up_rows else []
    if plan["status"] != "aborted" or row is None or row["status"] != "aborted":
        return ["given up, but the order is not aborted"]
    if plan["last_seq"] == 0:
        return [] if row["tombstone"] else ["given up before any step, but no tombstone"]
    return [] if len(gave_up_rows) == 1 else [f"{len(gave_up_rows)} ABORT_PLAN planner_gave_up in the outbox"]


def check_summary(report: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
    plans, summary = report["plans"], report["summary"]
    sums = {k: sum(p[k] for p in plans) for k in ("proposals", "applied", "duplicates", "corrections")}
    sums["give_ups"] = sum(p["gave_up"] for p in plans)
    rejections: collections.Counter[str] = collections.Counter()
    for p in plans:
        rejections.update(p["rejections"])
    same = all(summary[k] == v for k, v in sums.items()) and summary["rejections"] == dict(sorted(rejections.items()))
    return [
        ("complete", bool(report["complete"]), report.get("error") or f"{len(plans)} plans"),
        ("summary", same, "summary counts are the sums of the plans'"),
    ]


async def check_llm_report(report: Mapping[str, Any], db: Database) -> CheckResult:
    """Check every plan of an LLM report against PostgreSQL."""
    result = CheckResult()
    plans = report["plans"]
    order_ids = [p["order_id"] for p in plans]
    q = _queries()
    orders = {r["order_id"]: dict(r) for r in await db.fetch(q["orders"], order_ids)}
    outbox: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for r in await db.fetch(q["outbox"], order_ids):
        outbox[r["order_id"]].append(dict(r))
    rejected: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for r in await db.fetch(q["rejected"], order_ids):
        rejected[r["order_id"]].append(dict(r))
    for plan in plans:
        oid = plan["order_id"]
        row = orders.get(oid)
        result.record("order", plan, check_order(plan, row))
        result.record("applied", plan, check_applied(plan, outbox[oid]))
        result.record("rejected", plan, check_rejected(plan, rejected[oid]))
        result.record("gave_up", plan, check_gave_up(plan, row, outbox[oid]))
    result.run_checks = check_summary(report)
    result.stats = {
        "rejected_rows": sum(len(v) for v in rejected.values()),
        "outbox_rows": sum(len(v) for v in outbox.values()),
    }
    return result


def render(result: CheckResult, plans: int) -> str:
    from nexus_lab.tables import text_table

    rows = [(name, f"{result.held[name]}/{plans}", str(result.failed[name]), what) for name, what in CHECKS.items()]
    rows += [(name, "ok" if ok else "FAILED", "", detail) for name, ok, detail in result.run_checks]
    lines = [text_table(None, ["check", "held", "failed", "what"], rows, "lrrl")]
    if result.failures:
        lines += ["", f"FAILED ({len(result.failures)}):", *(f"  {f}" for f in result.failures[:200])]
    lines += ["", "all invariants held" if result.ok else "some invariants did NOT hold"]
    return "\n".join(lines)
