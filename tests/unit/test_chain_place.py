"""The decision log's hot path (`place`) hashes exactly the canonical form the verifier recomputes."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from nexus.core.audit_chain import GENESIS, Entry, append, chain_hash

texts = st.one_of(st.none(), st.text(max_size=30))
entries = st.builds(
    Entry,
    tenant_id=st.sampled_from(["default", "t\u00e9", "t\x1f"]),
    order_id=st.sampled_from(["o1", "o\u2028", "o\x00"]),
    decision=st.sampled_from(["APPLY", "REJECTED"]),
    event_id=texts,
    plan_id=texts,
    seq=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
    event_type=texts,
    code=texts,
    check=texts,
    message=texts,
    actor=texts,
)


def appended(batch: list[Entry], at: dt.datetime) -> object:
    try:
        return append(batch, {}, at)
    except Exception as exc:  # an unencodable value fails either way; compared below
        return type(exc)


@given(st.lists(entries, max_size=6))
def test_placed_hashes_are_the_canonical_ones(batch: list[Entry]) -> None:
    """Every placed record's hash is sha256 of the standard encoder's canonical bytes and the previous hash
    (non-ASCII, control characters, separators and integers beyond 64 bits included), so the chain verifies."""
    at = dt.datetime(2026, 12, 1, 20, 0, tzinfo=dt.UTC)
    records = appended(batch, at)
    if isinstance(records, type):
        return  # lone surrogates: refused by the canonical encoder itself, as before
    prev = {}
    for record in records:  # type: ignore[attr-defined]
        expected = chain_hash(record, prev.get(record.chain, GENESIS))
        assert record.hash == expected
        prev[record.chain] = record.hash
