"""Verifying the decision log: chains walked in storage order, and signed checkpoints over chain heads.

The faults and the canonical form are described in `core/audit_chain.py`. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nexus.core.audit_chain import FORMAT_VERSION, GENESIS, Record, canonical_json


class Fault(enum.StrEnum):
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    INSERTED = "INSERTED"
    REORDERED = "REORDERED"
    BAD_SIGNATURE = "BAD_SIGNATURE"
    """A checkpoint whose signature does not verify, or signed by a key that is not trusted."""
    CHECKPOINT_CHAIN = "CHECKPOINT_CHAIN"
    """A checkpoint that does not follow its predecessor (one was deleted, changed or reordered)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """The first bad record (or checkpoint) and what is wrong with it."""

    fault: Fault
    tenant_id: str | None
    order_id: str | None
    position: int | None
    record_id: int | None
    detail: str

    def describe(self) -> str:
        if self.order_id is None:  # a checkpoint: its id is in the detail
            return f"{self.fault.value}: {self.detail}"
        rid = f" (record id {self.record_id})" if self.record_id is not None else ""
        where = f"order ({self.tenant_id}, {self.order_id}) position {self.position}{rid}"
        return f"{self.fault.value}: {where}: {self.detail}"


@dataclasses.dataclass(frozen=True, slots=True)
class Verification:
    records: int
    chains: int
    checkpoints: int
    finding: Finding | None

    @property
    def ok(self) -> bool:
        return self.finding is None


def verify_records(
    records: Sequence[Record], starts: Mapping[tuple[str, str], tuple[int, bytes]] | None = None
) -> tuple[Finding | None, dict[tuple[str, str], list[Record]]]:
    """Walk records in storage order; return the first fault (or None) and each chain's records by position.

    `starts`: chains trimmed by an anchor (core/audit_anchor.py) begin after this (position, hash), not at GENESIS.
    """
    remaining: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in reversed(records):
        remaining[r.chain].append(r.position)  # a stack per chain: the last element is the next record's
    expected: dict[tuple[str, str], tuple[int, bytes]] = dict(starts or {})
    seen: dict[tuple[str, str], dict[int, Record]] = defaultdict(dict)
    for r in records:
        remaining[r.chain].pop()
        position, prev = expected.get(r.chain, (0, GENESIS))
        want = position + 1

        def finding(fault: Fault, detail: str, r: Record = r) -> Finding:
            return Finding(fault, r.tenant_id, r.order_id, r.position, r.id, detail)

        if r.position in seen[r.chain] or r.position < want:
            return finding(Fault.INSERTED, f"position {r.position} is already taken in this chain"), {}
        if r.position > want:
            if want in remaining[r.chain]:
                return finding(Fault.REORDERED, f"found position {r.position} where {want} was due"), {}
            missing = f"{want}" if r.position == want + 1 else f"{want}..{r.position - 1}"
            return finding(Fault.DELETED, f"position(s) {missing} missing before this record"), {}
        self_ok = r.computed_hash() == r.hash
        if not self_ok:
            return finding(Fault.MODIFIED, "content does not match its hash"), {}
        if r.prev_hash != prev:
            return finding(Fault.INSERTED, "well-formed record that does not link to its predecessor"), {}
        expected[r.chain] = (r.position, r.hash)
        seen[r.chain][r.position] = r
    return None, {chain: [by_pos[p] for p in sorted(by_pos)] for chain, by_pos in seen.items()}


# --- signed checkpoints -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    tenant_id: str
    order_id: str
    position: int
    hash: bytes

    def as_json(self) -> list[Any]:
        return [self.tenant_id, self.order_id, self.position, self.hash.hex()]

    @classmethod
    def from_json(cls, value: Sequence[Any]) -> Head:
        return cls(str(value[0]), str(value[1]), int(value[2]), bytes.fromhex(str(value[3])))


@dataclasses.dataclass(frozen=True, slots=True)
class SignedHeads:
    """A signed statement over chain heads: when, which heads, their digest and the Ed25519 signature over it.

    A checkpoint and an erasure record are such statements, each with one keyword-only field of its own.
    """

    at: str
    heads: tuple[Head, ...]
    digest: bytes
    signature: bytes
    key_id: str
    public_key: bytes
    id: int | None = None

    def signed_json(self, **own: Any) -> dict[str, Any]:
        """The statement's JSON, with the subclass's own fields after `at`."""
        return {
            "id": self.id,
            "at": self.at,
            **own,
            "heads": [h.as_json() for h in self.heads],
            "digest": self.digest.hex(),
            "signature": self.signature.hex(),
            "key_id": self.key_id,
            "public_key": self.public_key.hex(),
        }

    @staticmethod
    def signed_fields(body: Mapping[str, Any]) -> dict[str, Any]:
        """The fields every signed statement over heads has, read back from its JSON."""
        return {
            "at": str(body["at"]),
            "heads": tuple(Head.from_json(h) for h in body["heads"]),
            "digest": bytes.fromhex(body["digest"]),
            "signature": bytes.fromhex(body["signature"]),
            "key_id": str(body["key_id"]),
            "public_key": bytes.fromhex(body["public_key"]),
            "id": body.get("id"),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint(SignedHeads):
    """A signed commitment to the heads of the chains changed since the previous checkpoint.

    digest = SHA-256(canonical JSON of {"v", "at", "prev_digest" (hex), "heads": [[tenant, order, position,
    hash hex], ...] sorted}); the signature is Ed25519 over the 32 digest bytes. Each checkpoint names its
    predecessor's digest, so together they commit to every head ever checkpointed.
    """

    prev_digest: bytes = dataclasses.field(kw_only=True)

    def as_json(self) -> dict[str, Any]:
        return self.signed_json(prev_digest=self.prev_digest.hex())

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Checkpoint:
        return cls(prev_digest=bytes.fromhex(body["prev_digest"]), **cls.signed_fields(body))


def checkpoint_digest(at: str, prev_digest: bytes, heads: Iterable[Head]) -> bytes:
    ordered = sorted(heads, key=lambda h: (h.tenant_id, h.order_id))
    body = {"v": FORMAT_VERSION, "at": at, "prev_digest": prev_digest.hex(), "heads": [h.as_json() for h in ordered]}
    return hashlib.sha256(canonical_json(body)).digest()


def key_id(public_key: bytes) -> str:
    """A public key's short name: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def verify_checkpoints(
    checkpoints: Sequence[Checkpoint],
    chains: Mapping[tuple[str, str], Sequence[Record]],
    signature_ok: Any,
    *,
    complete: bool = True,
    erased: Mapping[tuple[str, str], Head] | None = None,
    start: bytes = GENESIS,
    archived: Mapping[tuple[str, str], Mapping[int, bytes]] | None = None,
    segment: bool = False,
) -> Finding | None:
    """Check each checkpoint's digest, signature (`signature_ok(checkpoint) -> bool`) and link to its
    predecessor, then that every head it names is still in its chain with the same hash.

    `complete` is False when only some chains were loaded (`--order`): heads of other chains are skipped.
    `erased`: the last heads of chains removed whole under a signed erasure (`core/audit_erasure.py`); a head of
    such a chain that is missing is accounted for, not DELETED.
    `start`: the digest the first checkpoint follows (GENESIS, or a checkpoint anchor's after a trim).
    `archived`: hashes of archived records by chain and position (core/audit_anchor.py): a head found there with
    its hash is accounted for. `segment`: an archive segment verified alone, where heads outside the records it
    holds (other chains, positions before or after it) belong to other parts of the log and are skipped.
    """
    prev = start
    for c in checkpoints:

        def bad(fault: Fault, detail: str, c: Checkpoint = c) -> Finding:
            return Finding(fault, None, None, None, c.id, f"checkpoint {c.id}: {detail}")

        if c.prev_digest != prev:
            return bad(Fault.CHECKPOINT_CHAIN, "does not follow the previous checkpoint")
        if checkpoint_digest(c.at, c.prev_digest, c.heads) != c.digest:
            return bad(Fault.BAD_SIGNATURE, "its heads do not match its digest")
        if not signature_ok(c):
            return bad(Fault.BAD_SIGNATURE, f"signature does not verify with key {c.key_id}")
        prev = c.digest
        for h in c.heads:
            if archived is not None and archived.get((h.tenant_id, h.order_id), {}).get(h.position) == h.hash:
                continue
            finding = _head_finding(c, h, chains.get((h.tenant_id, h.order_id)), complete, erased, segment)
            if finding is not None:
                return finding
    return None


def _head_finding(
    c: Checkpoint,
    h: Head,
    chain: Sequence[Record] | None,
    complete: bool,
    erased: Mapping[tuple[str, str], Head] | None,
    segment: bool,
) -> Finding | None:
    """What is wrong with one head a checkpoint signed, against its chain's loaded records (None: nothing)."""
    if chain is None and (not complete or segment):
        return None
    chain = chain or []
    first = chain[0].position if chain else 1
    end = chain[-1].position if chain else 0
    if segment and not first <= h.position <= end:
        return None
    if end < h.position and erased and covers(erased, h):
        return None
    if end < h.position or h.position < first:
        return Finding(
            Fault.DELETED,
            h.tenant_id,
            h.order_id,
            end + 1 if end < h.position else h.position,
            None,
            f"checkpoint {c.id} signed a head at position {h.position}; "
            + (f"the chain ends at {end}" if end < h.position else f"the chain starts at {first}"),
        )
    record = chain[h.position - first]
    if record.hash != h.hash:
        return Finding(
            Fault.MODIFIED,
            h.tenant_id,
            h.order_id,
            h.position,
            record.id,
            f"chain rewritten: hash differs from the one checkpoint {c.id} signed",
        )
    return None


def covers(erased: Mapping[tuple[str, str], Head], head: Head) -> bool:
    """Whether a checkpoint's `head` belongs to a chain erased at or past it (same hash at the same position)."""
    last = erased.get((head.tenant_id, head.order_id))
    if last is None or last.position < head.position:
        return False
    return last.position > head.position or last.hash == head.hash
