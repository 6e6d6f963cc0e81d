"""Signed erasure records: what the decision log says of chains removed whole (a tenant erased).

A checkpoint signed a head of every chain it saw; once a tenant is erased those chains are gone, and their heads
would read as deleted records. Before removing them, the eraser signs an `Erasure`: the tenant and the last head
of each of its chains at that moment. `nexus audit verify` accepts a checkpoint's head of a missing chain only
when a trusted erasure names that chain at or past the head's position (the same hash at the same position):
an erased chain verifies as erased, a chain deleted by anything else still fails as DELETED.

digest = SHA-256(canonical JSON of {"v", "kind": "erasure", "at", "tenant_id", "heads": [[tenant, order,
position, hash hex], ...] sorted}); the signature is Ed25519 over the digest, with a checkpoint's keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nexus.core.audit_chain import FORMAT_VERSION, canonical_json
from nexus.core.audit_verify import Head, SignedHeads


@dataclasses.dataclass(frozen=True, slots=True)
class Erasure(SignedHeads):
    """A signed record that the chains of `tenant_id` were removed whole, with the last head of each."""

    tenant_id: str = dataclasses.field(kw_only=True)

    def as_json(self) -> dict[str, Any]:
        return self.signed_json(tenant_id=self.tenant_id)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Erasure:
        return cls(tenant_id=str(body["tenant_id"]), **cls.signed_fields(body))


def erasure_digest(at: str, tenant_id: str, heads: Iterable[Head]) -> bytes:
    ordered = sorted(heads, key=lambda h: (h.tenant_id, h.order_id))
    body = {"v": FORMAT_VERSION, "kind": "erasure", "at": at, "tenant_id": tenant_id}
    body["heads"] = [h.as_json() for h in ordered]
    return hashlib.sha256(canonical_json(body)).digest()


def erased_heads(erasures: Sequence[Erasure], signature_ok: Any) -> dict[tuple[str, str], Head]:
    """The last head of every chain a valid erasure names (digest and signature checked; the heads of a
    tenant other than the erasure's own are ignored)."""
    out: dict[tuple[str, str], Head] = {}
    for erasure in erasures:
        if erasure_digest(erasure.at, erasure.tenant_id, erasure.heads) != erasure.digest:
            continue
        if not signature_ok(erasure):
            continue
        for head in erasure.heads:
            if head.tenant_id == erasure.tenant_id:
                out[(head.tenant_id, head.order_id)] = head
    return out
