"""The decision log's pure core: canonical form, chaining, the four kinds of tampering, checkpoints."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.audit.signing import sign, signature_checker
from nexus.core.audit_chain import GENESIS, Entry, Record, append, canonical_bytes
from nexus.core.audit_verify import Fault, Head, verify_checkpoints, verify_records
from nexus.core.decide.log import resolution_entries
from nexus.core.order_state import OrderState
from nexus.core.sequencing import resolve
from nexus.processes import builtin_catalog
from tests.factories import abort, step

CATALOG = builtin_catalog()
LIMITS = {"max_order_amount": 100000}  # the gateway's default tenant limit

AT = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


def entries(orders: int = 2, per_order: int = 4) -> list[Entry]:
    return [
        Entry("default", f"o{o}", "APPLY", event_id=f"e{o}-{s}", plan_id="p", seq=s, event_type="OrderCreated")
        for s in range(1, per_order + 1)
        for o in range(orders)
    ]


def stored(records: list[Record]) -> list[Record]:
    return [dataclasses.replace(r, id=i + 1) for i, r in enumerate(records)]


def full_check(records: list[Record], checkpoint_heads: list[Head] | None = None) -> Fault | None:
    finding, chains = verify_records(records)
    if finding is None and checkpoint_heads is not None:
        checkpoint = sign(KEY, AT, GENESIS, checkpoint_heads)
        finding = verify_checkpoints([checkpoint], chains, signature_checker())
    return finding.fault if finding else None


def heads_of(records: list[Record]) -> list[Head]:
    last: dict[tuple[str, str], Record] = {}
    for r in records:
        last[r.chain] = r
    return [Head(r.tenant_id, r.order_id, r.position, r.hash) for r in last.values()]


def test_canonical_form_is_sorted_compact_utf8() -> None:
    """The canonical record is sorted-key JSON without whitespace, UTF-8, with every field and the version."""
    [record] = append([Entry("t", "o", "REJECTED", message="prix: 10 €", code="CHECK_FAILED", check="c1")], {}, AT)
    text = canonical_bytes(record).decode("utf-8")
    assert text == (
        '{"actor":null,"at":"2026-11-30T12:00:00.123456Z","check":"c1","code":"CHECK_FAILED",'
        '"decision":"REJECTED","event_id":null,"event_type":null,"message":"prix: 10 €","order_id":"o",'
        '"plan_id":null,"position":1,"seq":null,"tenant_id":"t","v":1}'
    )
    assert record.prev_hash == GENESIS
    assert record.hash == hashlib.sha256(text.encode() + GENESIS).digest()


def test_chains_are_per_order_and_continue_from_heads() -> None:
    """Positions count per (tenant, order) from 1; each record links to its chain's previous hash."""
    first = append(entries(2, 2), {}, AT)
    assert [(r.order_id, r.position) for r in first] == [("o0", 1), ("o1", 1), ("o0", 2), ("o1", 2)]
    assert first[2].prev_hash == first[0].hash
    more = append(entries(1, 1), {("default", "o0"): (2, first[2].hash)}, AT)
    assert (more[0].position, more[0].prev_hash) == (3, first[2].hash)
    assert full_check(stored(first + more)) is None


def test_modified_record_is_named() -> None:
    """A changed field makes its record MODIFIED."""
    records = stored(append(entries(), {}, AT))
    records[3] = dataclasses.replace(records[3], decision="DISCARD")
    finding, _ = verify_records(records)
    assert finding is not None
    assert (finding.fault, finding.record_id) == (Fault.MODIFIED, 4)


def test_deleted_record_is_named() -> None:
    """A record removed from the middle of a chain is a DELETED position, named at its successor."""
    records = stored(append(entries(), {}, AT))
    gone = records.pop(2)  # o0 position 2
    finding, _ = verify_records(records)
    assert finding is not None
    assert (finding.fault, finding.order_id, finding.record_id) == (Fault.DELETED, "o0", gone.id + 2)
    assert "2 missing" in finding.detail


def test_reordered_records_are_named() -> None:
    """Two records of a chain swapped in storage order are REORDERED."""
    records = stored(append(entries(), {}, AT))
    records[2], records[4] = records[4], records[2]  # o0 positions 2 and 3
    finding, _ = verify_records(records)
    assert finding is not None
    assert (finding.fault, finding.position) == (Fault.REORDERED, 3)


def test_inserted_records_are_named() -> None:
    """A second record at a taken position, or a well-formed record not linking to its predecessor, is INSERTED."""
    records = stored(append(entries(), {}, AT))
    forged = dataclasses.replace(records[2], message="forged", id=99)
    forged = dataclasses.replace(forged, hash=forged.computed_hash())
    finding, _ = verify_records([*records, forged])
    assert finding is not None
    assert (finding.fault, finding.record_id) == (Fault.INSERTED, 99)
    [tail] = append([Entry("default", "o0", "APPLY")], {("default", "o0"): (4, b"\x01" * 32)}, AT)
    finding, _ = verify_records([*records, dataclasses.replace(tail, id=100)])
    assert finding is not None
    assert (finding.fault, finding.record_id) == (Fault.INSERTED, 100)


def test_checkpoint_catches_truncated_tail_and_rewritten_history() -> None:
    """A checkpointed head that vanished is DELETED; a chain recomputed end to end is MODIFIED at the head."""
    records = stored(append(entries(1, 4), {}, AT))
    heads = heads_of(records)
    assert full_check(records, heads) is None
    assert full_check(records[:-1], heads) is Fault.DELETED
    rewritten = stored(append([e._replace(decision="DISCARD") for e in entries(1, 4)], {}, AT))
    assert full_check(rewritten) is None  # the chain alone cannot tell
    assert full_check(rewritten, heads) is Fault.MODIFIED


def test_checkpoint_signature_and_chain_of_checkpoints() -> None:
    """A forged signature, an untrusted key or a missing predecessor checkpoint fails verification."""
    records = stored(append(entries(1, 2), {}, AT))
    _, chains = verify_records(records)
    first = sign(KEY, AT, GENESIS, heads_of(records))
    second = sign(KEY, AT, first.digest, heads_of(records))
    assert verify_checkpoints([first, second], chains, signature_checker()) is None
    forged = dataclasses.replace(first, signature=bytes(64))
    found = verify_checkpoints([forged], chains, signature_checker())
    assert found is not None and found.fault is Fault.BAD_SIGNATURE
    other = sign(Ed25519PrivateKey.generate(), AT, GENESIS, heads_of(records))
    assert verify_checkpoints([other], chains, signature_checker()) is None
    found = verify_checkpoints([other], chains, signature_checker({first.public_key}))
    assert found is not None and found.fault is Fault.BAD_SIGNATURE
    found = verify_checkpoints([second], chains, signature_checker())
    assert found is not None and found.fault is Fault.CHECKPOINT_CHAIN


def test_resolution_entries_log_drained_and_dropped_steps() -> None:
    """A drained buffered step is logged as APPLY after its drainer; buffered steps dropped by an abort as DISCARD."""
    s1, s2, s3, s4 = (step("o", "p", n) for n in (1, 2, 3, 4))
    r = resolve(OrderState("o"), [s1, s3, s2], {}, catalog=CATALOG, limits=LIMITS)
    assert [(e.seq, e.decision) for e in resolution_entries(r, {})] == [
        (1, "APPLY"),
        (3, "BUFFER"),
        (2, "APPLY"),
        (3, "APPLY"),
    ]
    r = resolve(r.after, [s3, abort("o", "p")], {}, catalog=CATALOG, limits=LIMITS)
    assert [e.decision for e in resolution_entries(r, {})] == ["DUPLICATE", "APPLY"]
    pending = {4: s4}
    r = resolve(
        OrderState("o", plan_id="p", buffered=frozenset({4})),
        [abort("o", "p")],
        pending,
        catalog=CATALOG,
        limits=LIMITS,
    )
    assert [(e.seq, e.decision) for e in resolution_entries(r, pending)] == [(None, "TOMBSTONE"), (4, "DISCARD")]


tampering = st.sampled_from(["modify", "delete", "swap", "insert", "duplicate"])


@settings(max_examples=300, deadline=None)
@given(
    orders=st.integers(1, 3),
    per_order=st.integers(1, 5),
    kind=tampering,
    pick=st.integers(0, 10_000),
    other=st.integers(0, 10_000),
    field=st.sampled_from(["decision", "message", "seq", "actor", "at", "hash", "prev_hash", "position"]),
)
def test_any_single_tampering_is_detected(
    orders: int, per_order: int, kind: str, pick: int, other: int, field: str
) -> None:
    """Any single modification, deletion, same-chain swap or insertion of a checkpointed log is detected."""
    records = stored(append(entries(orders, per_order), {}, AT))
    heads = heads_of(records)
    i = pick % len(records)
    target = records[i]
    tampered = list(records)
    if kind == "modify":
        changed = {
            "decision": "REJECTED",
            "message": "x",
            "seq": (target.seq or 0) + 1,
            "actor": "mallory",
            "at": "2026-01-01T00:00:00.000000Z",
            "hash": bytes(32),
            "prev_hash": b"\x07" * 32,
            "position": target.position + 1,
        }[field]
        tampered[i] = dataclasses.replace(target, **{field: changed})
    elif kind == "delete":
        del tampered[i]
    elif kind == "swap":
        same = [j for j, r in enumerate(records) if r.chain == target.chain and j != i]
        if not same:
            return
        j = same[other % len(same)]
        tampered[i], tampered[j] = tampered[j], tampered[i]
    elif kind == "insert":
        forged = dataclasses.replace(target, message="forged", id=999)
        forged = dataclasses.replace(forged, hash=forged.computed_hash())
        tampered.insert(other % (len(records) + 1), forged)
    else:
        tampered.insert(other % (len(records) + 1), dataclasses.replace(target, id=999))
    assert full_check(tampered, heads) is not None
