"""Server-numbered steps: which sequence number a proposed step takes, and when a proposal is a repeat.
Pure: no I/O; the batch fold (`core/decide/numbering.py`) applies `number_one` to each proposal as it
reaches it, under the order's lock, from the state the order's earlier steps of the batch left.

An agent proposing steps through `POST /v1/orders/{order_id}/steps` (or the MCP `propose_step` tool) does
not count: the gateway numbers its steps. The rules, for one order's proposals in arrival order:

| proposal | answer |
|---|---|
| keyed, its event id seen by this order (a first verdict is stored) | REPEAT of that verdict |
| keyed, the key seen earlier in the same batch | SAME_AS that earlier proposal |
| unkeyed, the step and data of the order's last applied step, within the window | REPEAT of its verdict |
| anything else | NEW: the next free sequence number |

The next free number comes after `last_seq`, after a step HELD for approval (it keeps its number), and after
every buffered step, so parallel proposals take consecutive numbers in arrival order. A keyed proposal's
event id is `uuid5(tenant, order_id, idempotency_key)`: the same key always names the same step, so a
retried call is recognised however long after, and a repeated REJECTED step is not decided (nor counted
toward `max_rejections`) twice. To repeat a step on purpose, pass distinct keys.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEFAULT_REPEAT_WINDOW_S = 60.0
_STEP_KEY_NAMESPACE = uuid.UUID("3f0c9a52-6d0e-4b7a-9c61-737465706b79")


def event_id_for(tenant_id: str, order_id: str, idempotency_key: str) -> uuid.UUID:
    """The event id of a keyed step: derived from its tenant, order and key, so a retry names the same step."""
    return uuid.uuid5(_STEP_KEY_NAMESPACE, f"{tenant_id}\x1f{order_id}\x1f{idempotency_key}")


def data_digest(step: str, data: Mapping[str, Any]) -> str:
    """A digest of a step's type and data, independent of key order (what "the same proposal" means)."""
    canonical = json.dumps([step, data], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def next_seq(last_seq: int, buffered: Iterable[int] = (), *, held: bool = False) -> int:
    """The order's next free sequence number: after `last_seq`, a held step's number and every buffered one."""
    taken = last_seq + 1 if held else last_seq
    return max(taken, max(buffered, default=0)) + 1


@dataclasses.dataclass(frozen=True, slots=True)
class Proposal:
    """A step proposed without a sequence number."""

    event_id: uuid.UUID
    digest: str
    keyed: bool


@dataclasses.dataclass(frozen=True, slots=True)
class FirstVerdict:
    """The first decision on a numbered step, as stored for its order (answered under `first`)."""

    event_id: uuid.UUID
    seq_id: int | None
    digest: str
    decision: str
    code: str | None = None
    check: str | None = None
    message: str | None = None
    decided_at: dt.datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "code": self.code, "check": self.check, "message": self.message}


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """What `number` decided for one proposal: a NEW number, a REPEAT of a stored verdict, or the SAME_AS
    an earlier proposal of this batch (by its index in the proposals)."""

    kind: Kind
    seq_id: int | None = None
    first: FirstVerdict | None = None
    same_as: int | None = None


class Kind(enum.StrEnum):
    """What a proposal is: a NEW step, a REPEAT of a stored verdict, or the SAME_AS an earlier proposal."""

    NEW = "NEW"
    REPEAT = "REPEAT"
    SAME_AS = "SAME_AS"


def number(
    proposals: Sequence[Proposal],
    *,
    last_seq: int,
    buffered: Iterable[int] = (),
    held: bool = False,
    known: Mapping[uuid.UUID, FirstVerdict] | None = None,
    last_applied: FirstVerdict | None = None,
    now: dt.datetime,
    window_s: float = DEFAULT_REPEAT_WINDOW_S,
) -> list[Assignment]:
    """One assignment per proposal, in order, all from one state (the table in the module's docstring).

    `known`: the stored first verdicts of this order's keyed steps, by event id; `last_applied`: the stored
    verdict of the order's last applied numbered step, if it is the order's last applied step."""
    seq = next_seq(last_seq, buffered, held=held)
    seen: dict[uuid.UUID, int] = {}
    out: list[Assignment] = []
    for index, proposal in enumerate(proposals):
        assignment = number_one(
            proposal, seq, last_seq=last_seq, known=known or {}, seen=seen, last_applied=last_applied, now=now,
            window_s=window_s,
        )  # fmt: skip
        if assignment.kind is Kind.NEW:
            seen[proposal.event_id] = index
            seq += 1
        out.append(assignment)
    return out


def number_one(
    proposal: Proposal,
    seq: int,
    *,
    last_seq: int,
    known: Mapping[uuid.UUID, FirstVerdict],
    seen: Mapping[uuid.UUID, int],
    last_applied: FirstVerdict | None,
    now: dt.datetime,
    window_s: float = DEFAULT_REPEAT_WINDOW_S,
) -> Assignment:
    """The assignment of one proposal, `seq` being the order's next free number: `seen` maps the event ids
    of the keyed proposals numbered earlier in the batch to their index."""
    if proposal.keyed and proposal.event_id in known:
        return Assignment(Kind.REPEAT, first=known[proposal.event_id])
    if proposal.keyed and proposal.event_id in seen:
        return Assignment(Kind.SAME_AS, same_as=seen[proposal.event_id])
    if not proposal.keyed and is_recent_repeat(proposal, last_applied, last_seq, now, window_s):
        assert last_applied is not None
        return Assignment(Kind.REPEAT, first=last_applied)
    return Assignment(Kind.NEW, seq_id=seq)


def is_recent_repeat(
    proposal: Proposal, last_applied: FirstVerdict | None, last_seq: int, now: dt.datetime, window_s: float
) -> bool:
    """Whether an unkeyed proposal repeats the order's last applied step (same step and data) within the window."""
    return (
        last_applied is not None
        and last_applied.decision == "APPLY"
        and last_applied.seq_id == last_seq
        and last_applied.digest == proposal.digest
        and last_applied.decided_at is not None
        and dt.timedelta(0) <= now - last_applied.decided_at <= dt.timedelta(seconds=window_s)
    )
