"""Server-numbered steps (nexus.core.numbering): next free numbers, keyed repeats, the repeat window."""

from __future__ import annotations

import datetime as dt
import uuid

from hypothesis import given
from hypothesis import strategies as st

from nexus.core.numbering import (
    FirstVerdict,
    Kind,
    Proposal,
    data_digest,
    event_id_for,
    next_seq,
    number,
)

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def _proposal(key: str | None, step: str = "OrderCreated", data: dict[str, object] | None = None) -> Proposal:
    digest = data_digest(step, data or {})
    if key is None:
        return Proposal(uuid.uuid4(), digest, keyed=False)
    return Proposal(event_id_for("acme", "o-1", key), digest, keyed=True)


@given(
    last_seq=st.integers(0, 1000),
    buffered=st.sets(st.integers(1, 1100), max_size=5),
    held=st.booleans(),
    n=st.integers(1, 20),
)
def test_new_proposals_take_consecutive_numbers_after_everything_taken(
    last_seq: int, buffered: set[int], held: bool, n: int
) -> None:
    """Fresh proposals get consecutive numbers in arrival order, above last_seq, a held seq and every buffered seq."""
    taken = {s for s in buffered if s > last_seq} | ({last_seq + 1} if held else set())
    assignments = number([_proposal(None) for _ in range(n)], last_seq=last_seq, buffered=buffered, held=held, now=NOW)
    seqs = [a.seq_id for a in assignments]
    assert all(a.kind is Kind.NEW for a in assignments)
    assert seqs == list(range(seqs[0], seqs[0] + n))  # type: ignore[operator]
    assert seqs[0] == max([last_seq, *taken]) + 1
    assert not set(seqs) & taken  # type: ignore[arg-type]


@given(keys=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=12))
def test_a_key_is_numbered_once_and_its_repeats_point_at_the_first(keys: list[str]) -> None:
    """Within a batch each distinct key takes one number; a repeated key is SAME_AS its first proposal."""
    assignments = number([_proposal(k) for k in keys], last_seq=3, now=NOW)
    first_index: dict[str, int] = {}
    for i, (key, a) in enumerate(zip(keys, assignments, strict=True)):
        if key in first_index:
            assert (a.kind, a.same_as) == (Kind.SAME_AS, first_index[key])
        else:
            first_index[key] = i
            assert a.kind is Kind.NEW
    assert [a.seq_id for a in assignments if a.kind is Kind.NEW] == list(range(4, 4 + len(first_index)))


@given(decision=st.sampled_from(["APPLY", "REJECTED", "HELD", "BUFFER"]), age_s=st.floats(0, 10**7))
def test_a_stored_key_is_a_repeat_of_its_first_verdict_however_old(decision: str, age_s: float) -> None:
    """A key whose first verdict is stored answers REPEAT with that verdict, at any age, and takes no number."""
    proposal = _proposal("k")
    first = FirstVerdict(proposal.event_id, 2, proposal.digest, decision, decided_at=NOW - dt.timedelta(seconds=age_s))
    [a] = number([proposal], last_seq=5, known={proposal.event_id: first}, now=NOW)
    assert (a.kind, a.first, a.seq_id) == (Kind.REPEAT, first, None)


def test_event_ids_of_keys_depend_on_tenant_order_and_key() -> None:
    """The same key in another order or another tenant names another step."""
    ids = {event_id_for(t, o, k) for t in ("acme", "globex") for o in ("o-1", "o-2") for k in ("a", "b")}
    assert len(ids) == 8
    assert event_id_for("acme", "o-1", "a") == event_id_for("acme", "o-1", "a")


@given(age_s=st.floats(0, 120), same_data=st.booleans(), still_last=st.booleans())
def test_an_unkeyed_repeat_of_the_last_applied_step_within_the_window(
    age_s: float, same_data: bool, still_last: bool
) -> None:
    """Without a key, the same step and data as the order's last applied step within 60 s is a REPEAT; else NEW."""
    data = {"warehouse_id": "w-1"}
    proposal = _proposal(None, "InventoryValidated", data if same_data else {"warehouse_id": "w-2"})
    last = FirstVerdict(
        uuid.uuid4(),
        2,
        data_digest("InventoryValidated", data),
        "APPLY",
        decided_at=NOW - dt.timedelta(seconds=age_s),
    )
    [a] = number([proposal], last_seq=2 if still_last else 3, last_applied=last, now=NOW, window_s=60)
    if same_data and still_last and age_s <= 60:
        assert (a.kind, a.first) == (Kind.REPEAT, last)
    else:
        assert (a.kind, a.seq_id) == (Kind.NEW, 3 if still_last else 4)


def test_the_digest_ignores_key_order_but_not_values() -> None:
    """Data equal as JSON objects has one digest; another value or another step does not."""
    assert data_digest("S", {"a": 1, "b": 2}) == data_digest("S", {"b": 2, "a": 1})
    assert data_digest("S", {"a": 1}) != data_digest("S", {"a": 2})
    assert data_digest("S", {"a": 1}) != data_digest("T", {"a": 1})


def test_next_seq_keeps_a_held_number() -> None:
    """A held step at last_seq + 1 keeps its number: the next proposal takes last_seq + 2."""
    assert next_seq(4) == 5
    assert next_seq(4, held=True) == 6
    assert next_seq(4, [7, 6]) == 8
