"""The anchors' pure rules (core/audit_anchor.py): a trimmed chain verifies from its anchor, an anchor must match its
archive, and only checkpoints and anchors nothing retained needs may leave."""

from __future__ import annotations

import datetime as dt

from nexus.core.audit_anchor import ChainAnchor, anchor_finding, chain_starts, stale_anchors, trimmable_checkpoints
from nexus.core.audit_chain import GENESIS, Entry, append
from nexus.core.audit_verify import Checkpoint, Head, verify_records

AT = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)


def _chain(n: int, order: str = "o") -> list:  # type: ignore[type-arg]
    return append([Entry("t", order, "APPLY", seq=i) for i in range(1, n + 1)], {}, AT)


def _checkpoint(at: str, *heads: tuple[str, int]) -> Checkpoint:
    signed = tuple(Head("t", o, p, bytes(32)) for o, p in heads)
    return Checkpoint(at, signed, bytes(32), b"", "k", b"", prev_digest=GENESIS)


def test_a_trimmed_chain_verifies_from_its_anchor_and_not_without_it() -> None:
    """Records 4..6 of a chain verify when an anchor says 1..3 left with record 3's hash; alone they read DELETED."""
    records = _chain(6)
    anchor = ChainAnchor("t", "o", 4, records[2].hash, "t/1_3.jsonl", whole=False)
    finding, _ = verify_records(records[3:], chain_starts([anchor]))
    assert finding is None
    finding, _ = verify_records(records[3:])
    assert finding is not None and finding.fault.value == "DELETED"


def test_an_anchor_must_match_the_archived_record_before_it() -> None:
    """An anchor whose previous hash is not the archived record's is MODIFIED; one whose archive lacks it DELETED."""
    records = _chain(3)
    anchor = ChainAnchor("t", "o", 4, records[2].hash, "t/1_3.jsonl", whole=True)
    archived = {("t", "o"): {r.position: r.hash for r in records}}
    assert anchor_finding([anchor], archived) is None
    forged = ChainAnchor("t", "o", 4, records[1].hash, "t/1_3.jsonl", whole=True)
    assert (f := anchor_finding([forged], archived)) is not None and f.fault.value == "MODIFIED"
    assert (f := anchor_finding([anchor], {})) is not None and f.fault.value == "DELETED"


def test_only_checkpoints_whose_heads_are_signed_again_or_archived_leave() -> None:
    """The prefix stops at the first old checkpoint with a head nothing later covers, and at the retention cut."""
    old, new, cut = "2026-01-01T00:00:00.000000Z", "2026-12-01T00:00:00.000000Z", "2026-06-01T00:00:00.000000Z"
    first = _checkpoint(old, ("a", 2), ("b", 1))
    second = _checkpoint(old, ("c", 5))
    third = _checkpoint(new, ("b", 3))
    archived_a = ChainAnchor("t", "a", 3, bytes(32), "t/x.jsonl", whole=True)
    assert trimmable_checkpoints([first, second, third], cut, [archived_a], {}) == 1
    assert trimmable_checkpoints([first, second, third], cut, [], {}) == 0
    assert trimmable_checkpoints([first, third], cut, [archived_a], {}) == 1  # `third` is newer than the cut
    archived_b = ChainAnchor("t", "b", 4, bytes(32), "t/y.jsonl", whole=True)
    assert trimmable_checkpoints([first, _checkpoint(old, ("b", 3))], cut, [archived_a, archived_b], {}) == 1


def test_the_latest_checkpoint_never_leaves() -> None:
    """Even with every head it signed archived, the latest checkpoint stays: the next one will link to it."""
    only = _checkpoint("2026-01-01T00:00:00.000000Z", ("a", 2))
    archived_a = ChainAnchor("t", "a", 3, bytes(32), "t/x.jsonl", whole=True)
    assert trimmable_checkpoints([only], "2026-06-01T00:00:00.000000Z", [archived_a], {}) == 0


def test_anchors_leave_once_no_retained_checkpoint_needs_them() -> None:
    """A whole chain's anchor stays while a retained checkpoint names the chain below it; a replaced anchor leaves."""
    whole = ChainAnchor("t", "a", 3, bytes(32), "t/x.jsonl", whole=True, id=1)
    cut1 = ChainAnchor("t", "~ingress", 4, bytes(32), "t/x.jsonl", whole=False, id=2)
    cut2 = ChainAnchor("t", "~ingress", 9, bytes(32), "t/y.jsonl", whole=False, id=3)
    assert stale_anchors([whole, cut1, cut2], [_checkpoint("x", ("a", 2))]) == [2]
    assert stale_anchors([whole, cut1, cut2], []) == [1, 2]
