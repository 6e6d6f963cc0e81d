"""The pure binding of an approval: the data hash is canonical, and `binding_mismatch` names every field that
differs (an omitted one is not compared; a UUID or hash in another spelling still matches)."""

from __future__ import annotations

import uuid

from nexus.core.decide.approvals import ApprovalBinding, binding_mismatch, data_sha256

EVENT = uuid.UUID("7b0f5a8e-0d7c-4c1e-9b7c-1f2e3d4c5b6a")


def test_the_data_hash_ignores_key_order_and_whitespace() -> None:
    """Two spellings of the same data hash alike; another amount does not."""
    assert data_sha256({"amount": 1500, "currency": "USD"}) == data_sha256({"currency": "USD", "amount": 1500})
    assert data_sha256({"amount": 1500}) != data_sha256({"amount": 1501})


def test_a_matching_expectation_passes_and_each_difference_is_named() -> None:
    """The approval's own fields (in any spelling) fit; each wrong field is named with the approval's value."""
    bound = ApprovalBinding.of(EVENT, {"amount": 1500}, 2, 3)
    same = {"event_id": str(EVENT).upper(), "data_sha256": bound.data_sha256.upper(), "process_version": 2, "seq_id": 3}
    assert binding_mismatch(bound, same) is None
    assert binding_mismatch(bound, {}) is None
    wrong = binding_mismatch(bound, {"seq_id": 4, "process_version": 1, "event_id": "x"})
    assert wrong is not None
    assert "seq_id is 3" in wrong and "process_version is 2" in wrong and f"event_id is '{EVENT}'" in wrong
    assert "data_sha256" not in wrong
