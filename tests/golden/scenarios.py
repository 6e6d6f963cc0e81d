"""The golden corpus's requests: hand-written scenarios reaching every decision and code, then a seeded
random mix of plans of several processes, sent in batches over both ingress kinds.

Pure and deterministic (event ids are uuid5 of a counter, timestamps fixed, `random.Random(22)`): the
corpus file stores the requests, so replaying never regenerates them; this module only records anew.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from typing import Any

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PAST = "2020-01-01T00:00:00+00:00"
FAR = "2099-01-01T00:00:00+00:00"
_NS = uuid.UUID("9f0c1f52-6a4e-4d1e-8e0a-676f6c64656e")

ORDER_STEPS = ("OrderCreated", "InventoryValidated", "PaymentProcessed", "OrderShipped", "OrderCompleted")

Action = dict[str, Any]


class Corpus:
    """Builds actions: `submit` (a batch of raw items over `http` or `kafka`), `approve`/`deny`,
    `effect_ok`/`effect_abort` (a saga effect's outcome, as the executor writes it), `sweep` (the
    deadline sweep), `expire` (buffer expiry)."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self._n = 0

    def eid(self) -> str:
        self._n += 1
        return str(uuid.uuid5(_NS, str(self._n)))

    # --- envelopes ------------------------------------------------------------------------------------

    def env(
        self, order: str, plan: str, event_type: str, seq: int | None, data: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event_id": self.eid(),
            "event_type": event_type,
            "plan_id": plan,
            "order_id": order,
            "timestamp": (T0 + dt.timedelta(seconds=seq or 0)).isoformat(),
            "schema_version": "1.0",
            "data": data or {},
        }
        if seq is not None:
            body["seq_id"] = seq
        body.update({k: v for k, v in extra.items() if v is not None})
        return body

    def order_step(self, order: str, plan: str, seq: int, *, total: int = 10, **extra: Any) -> dict[str, Any]:
        """Step `seq` of the order's five (order, order_reviewed, fulfilment, timed), data consistent with `total`."""
        event_type = ORDER_STEPS[min(seq, 5) - 1]
        data: dict[str, Any] = {}
        if event_type == "OrderCreated":
            data = {
                "user_id": "u1",
                "items": [{"product_id": "p", "quantity": 1, "unit_price": total}],
                "total_amount": total,
                "currency": "USD",
            }
        elif event_type == "PaymentProcessed":
            data = {"payment_id": "pay-1", "amount": total, "currency": "USD"}
        return self.env(order, plan, event_type, seq, data, **extra)

    def order_plan(self, order: str, plan: str, *, total: int = 10, n: int = 5, **first: Any) -> list[dict[str, Any]]:
        return [self.order_step(order, plan, s, total=total, **(first if s == 1 else {})) for s in range(1, n + 1)]

    def refund_plan(self, order: str, plan: str, path: str, amount: int = 50, **extra: Any) -> list[dict[str, Any]]:
        """A refund's steps along `path`: auto, review (approved) or rejected."""
        types: list[tuple[str, dict[str, Any]]] = [
            ("RefundRequested", {"amount": amount, "currency": "EUR", "reason": "broken"})
        ]
        if path == "auto":
            types += [("RefundAutoApproved", {}), ("RefundPaid", {"amount": amount, "currency": "EUR"})]
        elif path == "review":
            types += [
                ("RefundReviewStarted", {}),
                ("RefundReviewApproved", {"reviewer": "ann"}),
                ("RefundPaid", {"amount": amount, "currency": "EUR"}),
            ]
        else:
            types += [("RefundReviewStarted", {}), ("RefundReviewRejected", {})]
        return [
            self.env(order, plan, t, i, d, process="refund", **(extra if i == 1 else {}))
            for i, (t, d) in enumerate(types, 1)
        ]

    def abort(self, order: str, plan: str, at: int = 0, code: str = "manual") -> dict[str, Any]:
        return self.env(order, plan, "ABORT_PLAN", None, {"reason": "agent", "abort_code": code, "aborted_at_seq": at})

    def replan(self, order: str, plan: str, new_plan: str) -> dict[str, Any]:
        return self.env(order, plan, "REPLAN", None, {"new_plan_id": new_plan, "reason": "better idea"})

    # --- actions --------------------------------------------------------------------------------------

    def submit(self, items: list[Any], kind: str = "http") -> None:
        raws = [item if isinstance(item, str) else json.dumps(item) for item in items]
        self.actions.append({"op": "submit", "kind": kind, "items": raws})

    def one(self, *items: Any, kind: str = "http") -> None:
        """Each item in a request of its own."""
        for item in items:
            self.submit([item], kind)

    def op(self, op: str, **args: Any) -> None:
        self.actions.append({"op": op, **args})


def sequencing(c: Corpus) -> None:
    """Position decisions: APPLY, BUFFER and drain, DUPLICATE, DISCARD, TOMBSTONE, PLAN_MISMATCH."""
    plan = c.order_plan("o-happy", "p-happy")
    c.submit(plan)
    c.submit([plan[0]])  # the same step again: DUPLICATE
    s = c.order_plan("o-reorder", "p-reorder")
    c.one(s[2], s[4], s[0], s[1], s[1], s[3])
    c.submit([s[2]], "kafka")
    a = c.order_plan("o-abort", "p-abort")
    c.one(a[0], a[1], a[3])  # a buffered step dropped by the abort
    c.one(c.abort("o-abort", "p-abort", 2), a[2], c.abort("o-abort", "p-abort", 2))
    c.one(c.abort("o-tomb", "p-tomb"), c.order_step("o-tomb", "p-tomb", 1), c.abort("o-tomb", "p-tomb"))
    c.one(c.abort("o-happy", "p-happy", 5))  # ABORT_PLAN on a completed order: DUPLICATE
    m = c.order_plan("o-mismatch", "p-1", n=2)
    c.submit([m[0], c.order_step("o-mismatch", "p-2", 2)])
    c.submit([c.order_step("o-mismatch", "p-3", 2), m[1]], "kafka")
    c.submit([c.order_step("o-kafka", "p-k", s) for s in (2, 1, 3)], "kafka")


def replans(c: Corpus) -> None:
    """Plan swap: APPLY, stragglers DISCARD PLAN_SUPERSEDED, resend and terminal DUPLICATE, none before start."""
    r = c.order_plan("o-replan", "p-old")
    c.one(r[0], r[1], r[3])  # seq 4 buffered under the old plan: dropped by the REPLAN
    swap = c.replan("o-replan", "p-old", "p-new")
    c.one(swap, r[2], swap, c.order_step("o-replan", "p-other", 3))
    c.one(*c.order_plan("o-replan", "p-new")[2:])
    c.one(c.replan("o-replan", "p-new", "p-newer"))  # completed: DUPLICATE
    c.one(c.replan("o-noorder", "p-x", "p-y"))  # nothing to replace: DISCARD
    c.submit([c.replan("o-kreplan", "p-a", "p-b"), c.order_step("o-kreplan", "p-a", 1)], "kafka")
    c.submit([c.replan("o-kreplan", "p-a", "p-b"), c.order_step("o-kreplan", "p-b", 2)], "kafka")


def rejections(c: Corpus) -> None:
    """Process validation: every REJECTED code, a replayed rejection, a drained rejection, a correction."""
    c.one(c.order_step("o-rej", "p-rej", 1))
    bad = c.env("o-rej", "p-rej", "OrderShipped", 2)
    c.one(bad, bad)  # INVALID_TRANSITION, then the same answer again
    c.one(c.env("o-rej", "p-rej", "Teleported", 2))  # UNKNOWN_STEP
    c.one(c.order_step("o-rej", "p-rej", 2), c.order_step("o-rej", "p-rej", 3, total=11))  # CHECK_FAILED
    c.one(c.order_step("o-rej", "p-rej", 3), *c.order_plan("o-rej", "p-rej")[3:])
    c.one(c.order_step("o-rej", "p-rej", 6))  # AFTER_TERMINAL on a completed order
    c.one(c.order_step("o-limit", "p-limit", 1, total=200000))  # LIMIT_EXCEEDED (default limit)
    c.one(c.order_step("o-acme", "p-acme", 1, total=60, tenant_id="acme"))  # acme's limit is 50
    c.one(c.order_step("o-acme", "p-acme", 1, total=40, tenant_id="acme"))
    c.one(c.order_step("o-rej", "p-rej", 1, tenant_id="acme"))  # the same order id in another tenant
    c.one(c.order_step("o-unknown", "p-u", 1, process="nosuch"))  # an unregistered process
    d = c.order_plan("o-drain-rej", "p-dr")
    c.one(d[0], c.order_step("o-drain-rej", "p-dr", 3, total=99), d[1])  # seq 3 refused when drained
    c.one(d[2], d[3], c.order_step("o-drain-rej", "p-dr", 5))
    c.submit([c.env("o-krej", "p-kr", "OrderShipped", 1), c.order_step("o-krej", "p-kr", 1)], "kafka")


def refunds(c: Corpus) -> None:
    """The branched refund process, max_rejections, and the two terminal-state cases of a paid refund."""
    c.submit(c.refund_plan("r-auto", "p-ra", "auto"))
    c.submit(c.refund_plan("r-review", "p-rr", "review", amount=500))
    c.submit(c.refund_plan("r-rejected", "p-rx", "rejected", amount=500))
    c.one(c.env("r-rejected", "p-rx", "RefundPaid", 4, {"amount": 500, "currency": "EUR"}))  # after terminal
    c.one(*c.refund_plan("r-wrongpath", "p-rw", "auto", amount=500)[:2])  # auto approval of a big refund
    c.one(c.refund_plan("r-max", "p-rm", "auto")[0])
    for _ in range(3):  # the third rejection aborts the plan (policy_violation)
        c.one(c.env("r-max", "p-rm", "RefundPaid", 2, {"amount": 1, "currency": "EUR"}))
    c.one(c.env("r-max", "p-rm", "RefundAutoApproved", 2))
    c.one(
        c.env("r-bad", "p-rb", "RefundRequested", 1, {"amount": -5, "currency": "EUR", "reason": "x"}, process="refund")
    )
    paid = c.refund_plan("r-paid-abort", "p-rpa", "auto")
    c.submit(paid)
    c.one(c.abort("r-paid-abort", "p-rpa", 3))  # a refund at its terminal state: an abort is a DUPLICATE
    late = c.refund_plan("r-paid-late", "p-rpl", "auto")
    c.submit(late)
    for seq in (4, 5, 6, 7):  # steps after the terminal state: never counted toward max_rejections
        c.one(c.env("r-paid-late", "p-rpl", "RefundAutoApproved", seq))
    c.submit(c.refund_plan("r-kafka", "p-rk", "review", amount=900), "kafka")


def approvals(c: Corpus) -> None:
    """Held steps: HELD, resend, another step at its seq, successors buffered, approve, deny, abort, drained."""
    big = 5000
    h = c.order_plan("o-held", "p-h", total=big, process="order_reviewed")
    c.one(h[0], h[1], h[2], h[2], c.order_step("o-held", "p-h", 3, total=big), h[3])
    c.op("approve", event_id=h[2]["event_id"], tenant="default")
    c.one(h[4])
    d = c.order_plan("o-denied", "p-d", total=big, process="order_reviewed")
    c.one(d[0], d[1], d[2], d[3])
    c.op("deny", event_id=d[2]["event_id"], tenant="default")
    c.op("approve", event_id=d[2]["event_id"], tenant="default")  # answered already
    c.one(c.env("o-denied", "p-d", "PaymentProcessed", 3, {"payment_id": "p2", "amount": big, "currency": "EUR"}))
    x = c.order_plan("o-held-abort", "p-ha", total=big, process="order_reviewed")
    c.one(x[0], x[1], x[2], c.abort("o-held-abort", "p-ha", 2))
    c.op("approve", event_id=x[2]["event_id"], tenant="default")
    r = c.order_plan("o-held-drain", "p-hd", total=big, process="order_reviewed")
    c.one(r[0], r[2], r[1], r[3])  # the payment is held as it drains
    c.op("approve", event_id=r[2]["event_id"], tenant="default")
    s = c.order_plan("o-held-small", "p-hs", total=900, process="order_reviewed")
    c.submit(s, "kafka")


def deadlines(c: Corpus) -> None:
    """Deadlines: set and clipped in the answer, passed before the next step, the sweep's abort (once)."""
    c.one(c.order_step("o-dl-past", "p-dl", 1, deadline=PAST), c.order_step("o-dl-past", "p-dl", 2))
    c.one(c.order_step("o-dl-past", "p-dl", 3))
    c.one(c.order_step("o-dl-sweep", "p-ds", 1, deadline=PAST))
    c.op("sweep")
    c.op("sweep")
    c.one(c.order_step("o-dl-sweep", "p-ds", 2))
    c.one(c.order_step("o-dl-clip", "p-dc", 1, process="timed", deadline=FAR))
    c.one(c.order_step("o-dl-default", "p-dd", 1, process="timed"), c.order_step("o-dl-default", "p-dd", 2))
    buf = c.order_plan("o-dl-buf", "p-db", n=3, deadline=PAST)
    c.one(buf[0])
    c.submit([buf[2], buf[1]])  # the abort goes first; the buffered step is dropped
    c.one(c.replan("o-dl-replan", "p-x", "p-y"))


def sagas(c: Corpus) -> None:
    """fulfilment: effects hold the order, successors BUFFER, completion drains, PAST_PIVOT, effect_failed."""
    f = c.order_plan("o-saga", "p-s", process="fulfilment")
    c.one(f[0], f[1], f[2])
    c.op("effect_ok", tenant="default", order_id="o-saga", seq=2)
    c.op("effect_ok", tenant="default", order_id="o-saga", seq=3)
    c.one(f[3], f[4])
    c.op("effect_ok", tenant="default", order_id="o-saga", seq=4)
    c.one(c.abort("o-saga", "p-s", 4))  # past the pivot: REJECTED PAST_PIVOT
    c.op("effect_ok", tenant="default", order_id="o-saga", seq=5)
    c.one(c.abort("o-saga", "p-s", 5))
    g = c.order_plan("o-saga-fail", "p-sf", process="fulfilment")
    c.one(g[0], g[1], g[2])
    c.op("effect_abort", tenant="default", order_id="o-saga-fail")
    c.one(g[2], c.order_step("o-saga-fail", "p-sf", 3))
    h = c.order_plan("o-saga-abort", "p-sa", process="fulfilment")
    c.submit([h[0], h[1], c.abort("o-saga-abort", "p-sa", 2)], "kafka")
    k = c.order_plan("o-saga-replan", "p-sr", process="fulfilment")
    c.one(k[0], k[1], c.replan("o-saga-replan", "p-sr", "p-sr2"))
    c.op("effect_ok", tenant="default", order_id="o-saga-replan", seq=2)
    c.one(c.order_step("o-saga-replan", "p-sr2", 3, process="fulfilment"))


def ingress(c: Corpus) -> None:
    """Items that are not steps: parse errors, invalid envelopes and identifiers, a poisonous item."""
    bad = ["{not json", '{"a": 1, "a": 2}', '{"event_id": "x"}', "[]", '"text"']
    c.submit(bad)
    c.submit(bad[:3], "kafka")
    ident = c.order_step("o-ident", "p-i", 1)
    ident["order_id"] = "bad id!"
    c.one(ident)
    neg = c.order_step("o-neg", "p-n", 1)
    neg["seq_id"] = 0
    c.one(neg)
    first = c.order_step("o-poison-a", "p-pa", 1)
    twin = c.order_step("o-poison-b", "p-pb", 1)
    twin["event_id"] = first["event_id"]  # one event_id on two orders: the second is refused
    c.submit([first, c.order_step("o-poison-c", "p-pc", 1), twin])
    c.submit([c.order_step("o-poison-d", "p-pd", 1, event_id=first["event_id"])], "kafka")


def random_mix(c: Corpus, rng: random.Random, orders: int = 40) -> None:
    """Plans of several processes, their steps reordered, repeated, sometimes wrong or aborted, sent in
    batches that mix orders, over both ingress kinds."""
    pool: list[dict[str, Any]] = []
    for i in range(orders):
        kind = rng.choice(("order", "order", "reviewed", "refund", "timed"))
        order, plan = f"m-{i}", f"mp-{i}"
        if kind == "refund":
            steps = c.refund_plan(order, plan, rng.choice(("auto", "review", "rejected")), rng.choice((50, 500)))
        else:
            process = {"order": None, "reviewed": "order_reviewed", "timed": "timed"}[kind]
            steps = c.order_plan(order, plan, total=rng.choice((10, 700, 2000)), n=rng.randint(2, 5), process=process)
        extra: list[dict[str, Any]] = []
        roll = rng.random()
        if roll < 0.15:
            extra.append(c.abort(order, plan, rng.randint(0, 3)))
        elif roll < 0.25:
            extra.append(c.replan(order, plan, plan + "-r"))
        elif roll < 0.35:
            extra.append(c.order_step(order, plan + "-wrong", 2))
        elif roll < 0.45 and steps[-1]["event_type"].startswith("Order"):
            wrong = dict(steps[-1], event_id=c.eid(), data={"amount": 1, "currency": "GBP"})
            extra.append(wrong)
        items = steps + extra + [rng.choice(steps) for _ in range(rng.randint(0, 2))]
        rng.shuffle(items)
        pool.extend(items)
    # keep each order's relative order mostly, but interleave orders
    rng.shuffle(pool)
    while pool:
        size = rng.choice((1, 1, 2, 3, 5, 8))
        batch, pool = pool[:size], pool[size:]
        c.submit(batch, rng.choice(("http", "http", "kafka")))


def build() -> list[Action]:
    c = Corpus()
    for part in (sequencing, replans, rejections, refunds, approvals, deadlines, sagas, ingress):
        part(c)
    random_mix(c, random.Random(22))
    c.op("sweep")
    c.op("expire")
    return c.actions
