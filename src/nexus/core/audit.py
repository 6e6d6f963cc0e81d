"""The decision log's hash chain: canonical records and chaining (`core/audit_chain.py`, where the format
and the faults are described), verification and signed checkpoints (`core/audit_verify.py`), and the
entries of one order's batch (`core/decide/log.py`). The names importers know, re-exported. Pure."""

from __future__ import annotations

from nexus.core.audit_chain import (
    CANONICAL_FIELDS,
    FORMAT_VERSION,
    GENESIS,
    INGRESS_ORDER,
    Entry,
    Record,
    append,
    canonical_bytes,
    canonical_json,
    chain_hash,
    format_at,
    place,
)
from nexus.core.audit_verify import (
    Checkpoint,
    Fault,
    Finding,
    Head,
    Verification,
    checkpoint_digest,
    key_id,
    verify_checkpoints,
    verify_records,
)
from nexus.core.decide.log import resolution_entries

__all__ = [
    "CANONICAL_FIELDS",
    "FORMAT_VERSION",
    "GENESIS",
    "INGRESS_ORDER",
    "Checkpoint",
    "Entry",
    "Fault",
    "Finding",
    "Head",
    "Record",
    "Verification",
    "append",
    "canonical_bytes",
    "canonical_json",
    "chain_hash",
    "checkpoint_digest",
    "format_at",
    "key_id",
    "place",
    "resolution_entries",
    "verify_checkpoints",
    "verify_records",
]
