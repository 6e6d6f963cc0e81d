"""`nexus check REPORT --sink-log FILE`: prove an agent run's outcome from PostgreSQL and the sink's log.

For every plan of the report (see `nexus_lab.agent.runner` for its format) it checks:

- `acks`: every message got the decision the report expected (HTTP; Kafka acks carry no decision);
- `order`: the order's status, last_seq and plan_id are the expected ones (a replanned plan
  ends on its new plan, `final_plan_id`);
- `outbox`: one outbox row per applied (honest) event, exactly those event_ids, positions 1..n in
  process order (a REPLAN where it applied), plus the gateway's timeout abort of a stalled plan, and
  `orders.outbox_count` agrees; nothing is left in the reordering buffer;
- `delivered`: every notification of the order was delivered to every subscription (none pending, none dead);
- `sink`: the sink accepted each notification once (no 2xx twice for one Idempotency-Key), all of them,
  in position order, with valid signatures;
- `dead_letters`: each malformed or other-plan message is in `dead_letters` (HTTP) or the DLQ topic (Kafka);
- `rejected`: each hallucinated step is REJECTED with its code (and a denied held step with
  APPROVAL_DENIED), no other message is;
- `approvals`: an approval plan's held payment has exactly one approval, answered as the report
  says (approved: the step applied, with its successors; denied: REJECTED APPROVAL_DENIED, and then the
  plan's own abort: the held step and its successors never apply, which `outbox` proves); no other plan
  has any;

and for the run: the report is complete, and every failure kind and hostile mode whose rate is > 0
happened at least once. It waits (`--wait`) for the notifications to settle before judging, prints a
table of what held and what did not, names every plan that failed, and exits 1 if anything did not hold.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from asyncpg import Connection

from nexus.core.decide.deadlines import deadline_abort_id
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from nexus_lab import checker_removed as marker_checks
from nexus_lab.checker_run import check_run, notifications_settled
from nexus_lab.tables import text_table

CHECKS: dict[str, str] = {
    "acks": "each message got the expected decision",
    "order": "order status, last_seq and plan_id as expected",
    "outbox": "one outbox row per applied event, in order, nothing buffered",
    "delivered": "every notification delivered to every subscription",
    "sink": "sink accepted each notification once, all, in order, signed",
    "dead_letters": "malformed and other-plan messages dead-lettered",
    "rejected": "each hallucinated step REJECTED with its expected code, and nothing else rejected",
    "approvals": "each held step answered once, as the approver did; no other approval",
}
DEAD_LETTERED = ("DEAD_LETTER", "PLAN_MISMATCH")


@dataclasses.dataclass
class CheckResult:
    """What held and what did not, plus the delivery counts the demo prints."""

    held: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    failed: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    failures: list[str] = dataclasses.field(default_factory=list)
    run_checks: list[tuple[str, bool, str]] = dataclasses.field(default_factory=list)
    stats: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures and all(ok for _, ok, _ in self.run_checks)

    def record(self, check: str, plan: Mapping[str, Any], problems: Sequence[str]) -> None:
        if problems:
            self.failed[check] += 1
            who = f"plan {plan['plan_id']} (order {plan['order_id']}, #{plan['index']})"
            self.failures.extend(f"{who}: {check}: {p}" for p in problems)
        else:
            self.held[check] += 1

    def table(self, plans: int) -> str:
        rows = []
        for name, what in CHECKS.items():
            if name in self.skipped:
                rows.append((name, "-", "-", f"{what} (not checked: {self.skipped[name]})"))
            else:
                rows.append((name, f"{self.held[name]}/{plans}", str(self.failed[name]), what))
        for name, ok, detail in self.run_checks:
            rows.append((name, "yes" if ok else "no", "" if ok else "1", detail))
        return text_table(None, ("invariant", "held", "failed", "what"), rows, align="lrrl")


def read_sink_log(path: Path) -> list[dict[str, Any]]:
    """The sink's records, in the order it wrote them; a torn last line is ignored."""
    records: list[dict[str, Any]] = []
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _accepted(record: Mapping[str, Any]) -> bool:
    status = record.get("status")
    return isinstance(status, int) and 200 <= status < 300


def _honest_in_process_order(plan: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    keyed: list[tuple[float, Mapping[str, Any]]] = []
    for e in (e for e in plan["events"] if e["honest"]):
        if e["event_type"] == "REPLAN":  # Applies where it was sent, after the steps before it
            keyed.append((max((k for k, _ in keyed), default=-1.0) + 0.5, e))
        else:  # a step by its seq_id, whatever its process; the plan's ABORT_PLAN (no seq_id) after them
            keyed.append((float(e["seq_id"]) if e["seq_id"] is not None else math.inf, e))
    return [e for _, e in sorted(keyed, key=lambda pair: pair[0])]


def _expected_event_ids(plan: Mapping[str, Any]) -> list[str]:
    """The event_ids of the plan's notifications: its honest events, and the gateway's own abort of a
    stalled plan (one id per order and plan, `deadline_abort_id`)."""
    want = [e["event_id"] for e in _honest_in_process_order(plan)]
    if plan.get("gateway_abort") == "timeout":
        want.append(str(deadline_abort_id(plan["order_id"], plan.get("final_plan_id") or plan["plan_id"])))
    return want


def check_acks(plan: Mapping[str, Any]) -> list[str]:
    problems = []
    for e in plan["events"]:
        got, want = e["decision"], e["expected_decision"]
        # A retried request whose first attempt was applied is answered DUPLICATE: still once.
        retried_ok = e.get("attempts", 1) > 1 and got == "DUPLICATE" and want in ("APPLY", "BUFFER")
        if got != want and not retried_ok:
            problems.append(f"message {e['n']} ({e['mode'] or 'honest'} {e['event_type']}) got {got}, expected {want}")
        elif got == "REJECTED" and e.get("code") != e.get("expected_code"):
            # A blocked hallucination must be blocked for its own reason.
            problems.append(
                f"message {e['n']} ({e['mode']} {e['event_type']}) was REJECTED {e.get('code')}, "
                f"expected {e.get('expected_code')}"
            )
    return problems


def check_order(plan: Mapping[str, Any], row: Mapping[str, Any] | None) -> list[str]:
    expected = plan["expected"]
    if row is None:
        return ["no order row"]
    problems = []
    if row["status"] != expected["status"]:
        problems.append(f"status {row['status']!r}, expected {expected['status']!r}")
    if row["last_seq"] != expected["last_seq"]:
        problems.append(f"last_seq {row['last_seq']}, expected {expected['last_seq']}")
    final_plan = plan.get("final_plan_id") or plan["plan_id"]  # A replanned plan ends on its new plan
    if row["plan_id"] != final_plan:
        problems.append(f"plan_id {row['plan_id']!r}, expected {final_plan!r}")
    return problems


def check_outbox(
    plan: Mapping[str, Any], row: Mapping[str, Any] | None, outbox: Sequence[Mapping[str, Any]], buffered: list[int]
) -> list[str]:
    problems = []
    want = _expected_event_ids(plan)
    got = [str(r["event_id"]) for r in outbox]
    if got != want:
        problems.append(f"outbox event_ids {got}, expected {want} (the honest events, in process order)")
    positions = [r["position"] for r in outbox]
    if positions != list(range(1, len(outbox) + 1)):
        problems.append(f"outbox positions {positions}")
    if len(outbox) != plan["expected"]["notifications"]:
        problems.append(f"{len(outbox)} notifications, expected {plan['expected']['notifications']}")
    if row is not None and row["outbox_count"] != len(outbox):
        problems.append(f"orders.outbox_count {row['outbox_count']} but {len(outbox)} outbox rows")
    if buffered:
        problems.append(f"seqs {sorted(buffered)} still buffered")
    return problems


def check_delivered(outbox: Sequence[Mapping[str, Any]], deliveries: Sequence[Mapping[str, Any]]) -> list[str]:
    problems = []
    by_outbox: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for d in deliveries:
        by_outbox[str(d["outbox_id"])].append(d)
    for r in outbox:
        rows = by_outbox.get(str(r["id"]), [])
        if not rows:
            problems.append(f"notification {r['position']} has no delivery")
        for d in rows:
            if d["state"] != "delivered":
                problems.append(f"notification {r['position']} is {d['state']} for subscription {d['subscription_id']}")
    return problems


def check_sink(
    outbox: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]], *, allow_duplicates: bool
) -> list[str]:
    problems = []
    ids = {str(r["id"]): r["position"] for r in outbox}
    accepted: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    order_by_path: dict[str, list[int]] = collections.defaultdict(list)
    for rec in records:
        if rec.get("signature_valid") is False:
            problems.append(f"invalid signature on {rec.get('event_type')} attempt {rec.get('attempt')}")
        if not _accepted(rec):
            continue
        key, path = str(rec.get("idempotency_key")), str(rec.get("path", "/"))
        if key not in ids:
            problems.append(f"sink accepted an unknown notification {key}")
            continue
        accepted[path][key] += 1
        if accepted[path][key] == 1:
            order_by_path[path].append(ids[key])
    if not accepted and ids:
        return [*problems, f"sink accepted none of the {len(ids)} notifications"]
    for path, counts in accepted.items():
        missing = sorted(ids[k] for k in ids if k not in counts)
        if missing:
            problems.append(f"positions {missing} never accepted on {path}")
        twice = sorted(ids[k] for k, n in counts.items() if n > 1)
        if twice and not allow_duplicates:
            problems.append(f"positions {twice} accepted more than once on {path}")
        if order_by_path[path] != sorted(order_by_path[path]):
            problems.append(f"accepted out of order on {path}: positions {order_by_path[path]}")
    return problems


def check_dead_letters(plan: Mapping[str, Any], dead: set[str]) -> list[str]:
    problems = []
    for e in plan["events"]:
        if e["expected_decision"] not in DEAD_LETTERED or e.get("variant") == "not_json" or not e["event_id"]:
            continue  # a message that is not JSON has no event_id to find it by
        if e["event_id"] not in dead:
            problems.append(f"message {e['n']} ({e['mode']}) {e['event_id']} is not dead-lettered")
    return problems


def _denied(e: Mapping[str, Any]) -> bool:
    """A held step the approver denied (it ends REJECTED APPROVAL_DENIED)."""
    return e["expected_decision"] == "HELD" and e.get("variant") == "deny"


def check_rejected(plan: Mapping[str, Any], rejected: Mapping[str, str]) -> list[str]:
    """Every message expected REJECTED is recorded as rejected with its code; no other one is."""
    problems = []
    for e in plan["events"]:
        got = rejected.get(e["event_id"] or "")
        if _denied(e) and got != "APPROVAL_DENIED":
            problems.append(f"message {e['n']} (denied {e['event_type']}) rejected as {got}, expected APPROVAL_DENIED")
        elif _denied(e):
            continue
        elif e["expected_decision"] == "REJECTED" and got != e.get("expected_code"):
            problems.append(f"message {e['n']} ({e['mode']}) rejected as {got}, expected {e.get('expected_code')}")
        elif e["expected_decision"] != "REJECTED" and got is not None:
            problems.append(f"message {e['n']} ({e['mode'] or 'honest'} {e['event_type']}) was rejected: {got}")
    return problems


def check_approvals(plan: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The held step's one approval ended as the approver answered, and the answer's decision was
    the one expected (approved: APPLY; denied: REJECTED APPROVAL_DENIED); a plan that held nothing has none."""
    held = [e for e in plan["events"] if e["expected_decision"] == "HELD"]
    answer = plan.get("approval")
    if not held:
        return [f"{len(rows)} approvals, expected none"] if rows else []
    problems = []
    if answer is None:
        return ["the held step was never answered"]
    want_status = "approved" if answer["answer"] == "approve" else "denied"
    want_decision = ("APPLY", None) if want_status == "approved" else ("REJECTED", "APPROVAL_DENIED")
    if (answer.get("decision"), answer.get("code")) != want_decision:
        problems.append(f"the {answer['answer']} was answered {answer.get('decision')} {answer.get('code')}")
    got = [(str(r["event_id"]), r["status"]) for r in rows]
    if got != [(held[0]["event_id"], want_status)]:
        problems.append(f"approvals {got}, expected {[(held[0]['event_id'], want_status)]}")
    return problems


async def _dlq_event_ids(report: Mapping[str, Any], settings: Settings) -> set[str] | None:
    """Event ids found on the Kafka DLQ topic, or None when it cannot be read."""
    target = str(report["config"].get("target", ""))
    bootstrap = target.removeprefix("kafka://").split("/", 1)[0] or settings.kafka_bootstrap
    try:
        from nexus.kafka_io import read_topic

        records = await read_topic(bootstrap, settings.kafka_dlq_topic, security=settings.kafka_security())
    except Exception:  # noqa: BLE001 - the DLQ check is then reported as not checked
        return None
    ids = set()
    for r in records:
        try:
            value = json.loads(r.value or b"")
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("event_id"):
            ids.add(str(value["event_id"]))
    return ids


async def wait_settled(db: Database, report: Mapping[str, Any], sink_log: Path | None, timeout_s: float) -> bool:
    """Wait until every plan's notifications exist, none is pending, and the sink logged them all."""
    order_ids = [p["order_id"] for p in report["plans"]]
    expected = sum(p["expected"]["notifications"] for p in report["plans"])
    deadline = time.monotonic() + timeout_s
    while True:
        row = await db.fetchrow(query("checker.sql", "settled"), order_ids)
        settled = row is not None and row["notifications"] >= expected and row["pending"] == 0
        if settled and sink_log is not None:
            keys = {str(r.get("idempotency_key")) for r in read_sink_log(sink_log) if _accepted(r)}
            outbox = await db.fetch(query("checker.sql", "outbox"), order_ids)
            settled = all(str(r["id"]) in keys for r in outbox)
        if settled or time.monotonic() >= deadline:
            return settled
        await asyncio.sleep(0.2)


def _index(rows: Iterable[Mapping[str, Any]], key: str) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        out[str(r[key])].append(r)
    return out


async def check_report(
    report: Mapping[str, Any],
    db: Database,
    sink_log: Path | None,
    *,
    settings: Settings | None = None,
    wait_s: float = 30.0,
    allow_duplicates: bool = False,
) -> CheckResult:
    """Check every plan of `report` against the database (one snapshot: a remover taking an order away meanwhile
    is seen before or after, never half) and the sink's log."""
    await wait_settled(db, report, sink_log, wait_s)
    async with db.pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        return await _judge(report, conn, sink_log, settings, allow_duplicates)


async def _judge(
    report: Mapping[str, Any], db: Connection, sink_log: Path | None, settings: Settings | None, allow_duplicates: bool
) -> CheckResult:
    result = CheckResult()
    plans = report["plans"]
    order_ids = [p["order_id"] for p in plans]
    orders = {r["order_id"]: dict(r) for r in await db.fetch(query("checker.sql", "orders"), order_ids)}
    outbox = _index([dict(r) for r in await db.fetch(query("checker.sql", "outbox"), order_ids)], "order_id")
    deliveries = [dict(r) for r in await db.fetch(query("checker.sql", "deliveries"), order_ids)]
    by_order_deliveries = _index(deliveries, "order_id")
    buffered: dict[str, list[int]] = collections.defaultdict(list)
    for r in await db.fetch(query("checker.sql", "pending_events"), order_ids):
        buffered[r["order_id"]].append(r["seq_id"])
    sink_records = _index(
        [r for r in read_sink_log(sink_log) if r.get("order_id")] if sink_log is not None else [], "order_id"
    )

    dead = await _dead_lettered(report, db, result, settings)
    if sink_log is None:
        result.skipped["sink"] = "no --sink-log"
    rejected = {r["event_id"]: r["code"] for r in await db.fetch(query("checker.sql", "rejected"), order_ids)}
    approvals = _index([dict(r) for r in await db.fetch(query("checker.sql", "approvals"), order_ids)], "order_id")
    removed = {r["order_id"]: dict(r) for r in await db.fetch(query("checker.sql", "removed"), order_ids)}

    for plan in plans:
        oid = plan["order_id"]
        if oid not in orders and oid in removed:  # removed after its retention period: its marker speaks
            _check_removed(result, plan, removed[oid], sink_records.get(oid, []), allow_duplicates)
            continue
        row, rows = orders.get(oid), outbox.get(oid, [])
        if "acks" not in result.skipped:
            result.record("acks", plan, check_acks(plan))
        result.record("order", plan, check_order(plan, row))
        result.record("outbox", plan, check_outbox(plan, row, rows, buffered.get(oid, [])))
        result.record("delivered", plan, check_delivered(rows, by_order_deliveries.get(oid, [])))
        if "sink" not in result.skipped:
            result.record("sink", plan, check_sink(rows, sink_records.get(oid, []), allow_duplicates=allow_duplicates))
        if dead is not None:
            result.record("dead_letters", plan, check_dead_letters(plan, dead))
        result.record("rejected", plan, check_rejected(plan, rejected))
        result.record("approvals", plan, check_approvals(plan, approvals.get(oid, [])))
    created = sum(len(v) for v in outbox.values()) + sum(m["outbox_count"] for m in removed.values())
    deliveries += marker_checks.removed_deliveries(removed)
    result.run_checks = [*check_run(report), notifications_settled(created, deliveries)]
    lifecycle = await db.fetchrow(query("checker.sql", "lifecycle"), order_ids)
    all_records = [r for rs in sink_records.values() for r in rs]
    result.stats = {**_stats(created, deliveries, all_records, lifecycle), "removed": len(removed)}
    return result


def _check_removed(
    result: CheckResult,
    plan: Mapping[str, Any],
    marker: Mapping[str, Any],
    sink: Sequence[Mapping[str, Any]],
    allow_duplicates: bool,
) -> None:
    """A removed order's checks from its marker (nexus_lab.checker_removed)."""
    if "acks" not in result.skipped:
        result.record("acks", plan, check_acks(plan))
    result.record("order", plan, check_order(plan, marker))
    result.record("outbox", plan, marker_checks.check_removed_outbox(plan, marker))
    result.record("delivered", plan, marker_checks.check_removed_delivered(marker))
    if "sink" not in result.skipped:
        rows = marker_checks.derived_outbox(marker, _expected_event_ids(plan))
        result.record("sink", plan, check_sink(rows, sink, allow_duplicates=allow_duplicates))
    for name in marker_checks.REMOVED_UNCHECKED:
        if name not in result.skipped:
            result.record(name, plan, [])


async def _dead_lettered(
    report: Mapping[str, Any], db: Connection, result: CheckResult, settings: Settings | None
) -> set[str] | None:
    """The event ids dead-lettered of those expected to be (the table's, and over Kafka the DLQ topic's too);
    None when the DLQ topic cannot be read."""
    dead: set[str] | None
    wanted = [e["event_id"] for p in report["plans"] for e in p["events"] if e["expected_decision"] in DEAD_LETTERED]
    dead = {str(r["event_id"]) for r in await db.fetch(query("checker.sql", "dead_letters"), [w for w in wanted if w])}
    if report["config"].get("transport") == "kafka":
        result.skipped["acks"] = "Kafka acks carry no decision"
        # Kafka ingress records invalid messages in the table and plan mismatches on the DLQ topic.
        on_topic = await _dlq_event_ids(report, settings or Settings.from_env())
        if on_topic is None:
            result.skipped["dead_letters"] = "the Kafka DLQ topic could not be read"
            dead = None
        else:
            dead |= on_topic
    return dead


_LIFECYCLE = ("superseded", "timed_out", "held", "denied", "approved")


def _stats(
    created: int, deliveries: list[dict[str, Any]], all_records: list[Mapping[str, Any]], lifecycle: Any
) -> dict[str, int]:
    states = collections.Counter(d["state"] for d in deliveries)
    return {
        "notifications": created,
        "delivered": states["delivered"],
        "dead": states["dead"],
        "pending": states["pending"],
        "attempts": sum(d["attempts"] for d in deliveries),
        "retried": sum(max(0, d["attempts"] - 1) for d in deliveries),
        "sink_requests": len(all_records),
        "sink_accepted": sum(1 for r in all_records if _accepted(r)),
        "sink_faults": sum(1 for r in all_records if r.get("fault")),
        "sink_duplicates": sum(1 for r in all_records if r.get("duplicate")),
        **({k: int(lifecycle[k]) for k in _LIFECYCLE} if lifecycle else {}),
    }


def render(result: CheckResult, plans: int) -> str:
    lines = [result.table(plans)]
    if result.failures:
        lines.append("")
        lines.append(f"FAILED ({len(result.failures)}):")
        lines.extend(f"  {f}" for f in result.failures[:200])
        if len(result.failures) > 200:
            lines.append(f"  ... and {len(result.failures) - 200} more")
    lines.append("")
    lines.append("all invariants held" if result.ok else "some invariants did NOT hold")
    return "\n".join(lines)
