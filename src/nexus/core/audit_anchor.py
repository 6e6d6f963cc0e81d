"""Anchors: where the decision log starts after a trim, and which archive holds what left. Pure: no I/O.

The log is append-only, but not forever: a chain whose order was removed leaves whole, and the chains that never
finish (`~ingress`) and old checkpoints leave by age (nexus.audit.archive). Each trim first writes what leaves to
an archive segment, then stores an anchor naming that segment:

* a chain anchor: the chain's first retained position and the hash before it (`prev_hash`); for a chain that left
  whole (`whole`), the position after its last record and that record's hash;
* a checkpoint anchor: the first retained checkpoint's `prev_digest` (the digest of the last one that left).

Verification then starts each trimmed chain at its anchor instead of position 1 with GENESIS, starts the checkpoint
chain at the anchor's digest, and checks a retained checkpoint's head in a part that left against the archived
record at that position (`ArchivedHashes`, read from the segments the anchors name, each verified alone first).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from nexus.core.audit_chain import GENESIS, Record
from nexus.core.audit_verify import Checkpoint, Fault, Finding, Head

Chain = tuple[str, str]
ArchivedHashes = Mapping[Chain, Mapping[int, bytes]]
"""Per chain, the hash of every archived record by position (from segments that verified alone)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChainAnchor:
    """A chain's records before `position` left, into the segment `archive`; `prev_hash` is the last one's hash."""

    tenant_id: str
    order_id: str
    position: int
    prev_hash: bytes
    archive: str
    whole: bool
    """The chain left whole with its order: verification expects none of its records (a reused order id starts
    a new chain at position 1)."""
    id: int | None = None

    @property
    def chain(self) -> Chain:
        return (self.tenant_id, self.order_id)


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointAnchor:
    """The checkpoints before the first retained one left, into `archive`; `prev_digest` is the last one's digest."""

    prev_digest: bytes
    archive: str


def chain_starts(anchors: Iterable[ChainAnchor]) -> dict[Chain, tuple[int, bytes]]:
    """For `verify_records`: each trimmed (not whole) chain's last removed (position, hash), from its latest anchor."""
    starts: dict[Chain, tuple[int, bytes]] = {}
    for a in anchors:
        if not a.whole and a.position - 1 > starts.get(a.chain, (0, GENESIS))[0]:
            starts[a.chain] = (a.position - 1, a.prev_hash)
    return starts


def anchor_finding(anchors: Iterable[ChainAnchor], archived: ArchivedHashes) -> Finding | None:
    """Every chain anchor must be backed by its archive: the record before its position is archived with its hash."""
    for a in anchors:
        if a.position <= 1:
            continue
        found = archived.get(a.chain, {}).get(a.position - 1)
        if found is None:
            detail = f"anchored at position {a.position}, but {a.archive} holds no record at {a.position - 1}"
            return Finding(Fault.DELETED, a.tenant_id, a.order_id, a.position - 1, None, detail)
        if found != a.prev_hash:
            detail = f"anchor's previous hash differs from the archived record's in {a.archive}"
            return Finding(Fault.MODIFIED, a.tenant_id, a.order_id, a.position - 1, None, detail)
    return None


def trimmable_checkpoints(
    checkpoints: Sequence[Checkpoint],
    before: str,
    anchors: Iterable[ChainAnchor],
    erased: Mapping[Chain, Head],
) -> int:
    """How many of the oldest checkpoints may leave: a prefix of those signed before `before` (a `format_at`
    stamp) each of whose heads is signed again by a later checkpoint at or past its position, or lies in a
    part of its chain that was archived (an anchor past it) or erased, never the latest. Nothing a retained
    record needs leaves."""
    last_anchor: dict[Chain, int] = {}
    for a in anchors:
        last_anchor[a.chain] = max(last_anchor.get(a.chain, 0), a.position)
    later: dict[Chain, int] = {}
    superseded_after: list[dict[Chain, int]] = []
    for c in reversed(checkpoints):
        superseded_after.append(dict(later))
        for h in c.heads:
            later[(h.tenant_id, h.order_id)] = max(later.get((h.tenant_id, h.order_id), 0), h.position)
    superseded_after.reverse()
    count = 0
    # the latest checkpoint always stays: the next one links to it (`audit.sql` last_checkpoint)
    for c, after in zip(checkpoints[:-1], superseded_after[:-1], strict=True):
        if c.at >= before:
            break
        for h in c.heads:
            chain = (h.tenant_id, h.order_id)
            erased_head = erased.get(chain)
            if after.get(chain, 0) >= h.position or last_anchor.get(chain, 0) > h.position:
                continue
            if erased_head is not None and erased_head.position >= h.position:
                continue
            return count
        count += 1
    return count


def closing_run(checkpoints: Sequence[Checkpoint], records: Sequence[Record]) -> list[Checkpoint]:
    """The consecutive checkpoints from the first to the last that signed a head among `records` (empty if none)."""
    signed = {(r.tenant_id, r.order_id, r.position, r.hash) for r in records}
    hits = [
        i
        for i, c in enumerate(checkpoints)
        if any((h.tenant_id, h.order_id, h.position, h.hash) in signed for h in c.heads)
    ]
    return list(checkpoints[hits[0] : hits[-1] + 1]) if hits else []


def stale_anchors(anchors: Sequence[ChainAnchor], checkpoints: Iterable[Checkpoint]) -> list[int]:
    """The ids of chain anchors nothing needs any more: no retained checkpoint signed a head of the chain before
    the anchor's position, and the chain left whole or a later anchor of the chain replaces it."""
    needed: dict[Chain, int] = {}
    for c in checkpoints:
        for h in c.heads:
            chain = (h.tenant_id, h.order_id)
            needed[chain] = min(needed.get(chain, h.position), h.position)
    latest: dict[Chain, int] = {}
    for a in anchors:
        latest[a.chain] = max(latest.get(a.chain, 0), a.position)
    return [
        a.id
        for a in anchors
        if a.id is not None
        and needed.get(a.chain, a.position) >= a.position
        and (a.whole or latest[a.chain] > a.position)
    ]
