"""Loading the decision log (from PostgreSQL or an export file), verifying it, exporting it.

Export format (JSON Lines, UTF-8): a header line
``{"type": "header", "format": "nexus-decision-log", "version": 1, "public_keys": [{"key_id", "public_key"}]}``
(raw Ed25519 public keys in hex), then one ``{"type": "record", ...}`` line per record in storage order
(`Record.as_json`), then one ``{"type": "checkpoint", ...}`` line per checkpoint (`Checkpoint.as_json`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from nexus.audit.signing import signature_checker
from nexus.core.audit import Checkpoint, Head, Record, Verification, format_at, verify_checkpoints, verify_records
from nexus.core.audit_erasure import Erasure, erased_heads
from nexus.errors import ConfigurationError
from nexus.store.database import Database
from nexus.store.queries import query
from nexus.store.rows import from_row

FORMAT = "nexus-decision-log"


def record_of(row: Any) -> Record:
    return from_row(Record, row, at=format_at(row["at"]), prev_hash=bytes(row["prev_hash"]), hash=bytes(row["hash"]))


def _signed(row: Any) -> dict[str, Any]:
    """The fields a checkpoint and an erasure record share: when, which heads, and the signature over them."""
    return {
        "at": format_at(row["at"]),
        "heads": tuple(Head.from_json(h) for h in json.loads(row["heads"])),
        "digest": bytes(row["digest"]),
        "signature": bytes(row["signature"]),
        "key_id": row["key_id"],
        "public_key": bytes(row["public_key"]),
        "id": row["id"],
    }


def checkpoint_of(row: Any) -> Checkpoint:
    return Checkpoint(prev_digest=bytes(row["prev_digest"]), **_signed(row))


def erasure_of(row: Any) -> Erasure:
    return Erasure(tenant_id=row["tenant_id"], **_signed(row))


async def load(db: Database, order_id: str | None = None) -> tuple[list[Record], list[Checkpoint], list[Erasure]]:
    records = [record_of(r) for r in await db.fetch(query("audit.sql", "records"), order_id)]
    checkpoints = [checkpoint_of(r) for r in await db.fetch(query("audit.sql", "checkpoints"))]
    erasures = [erasure_of(r) for r in await db.fetch(query("erase.sql", "erasures"))]
    return records, checkpoints, erasures


def verify(
    records: Sequence[Record],
    checkpoints: Sequence[Checkpoint],
    *,
    trusted: set[bytes] | None = None,
    complete: bool = True,
    erasures: Sequence[Erasure] = (),
) -> Verification:
    """Recompute every chain, then check every checkpoint against them (a head of a chain a trusted erasure
    record removed is accounted for)."""
    finding, chains = verify_records(records)
    if finding is None:
        signature_ok = signature_checker(trusted)
        erased = erased_heads(erasures, signature_ok)
        finding = verify_checkpoints(checkpoints, chains, signature_ok, complete=complete, erased=erased)
    return Verification(len(records), len({r.chain for r in records}), len(checkpoints), finding)


def write_export(
    out: TextIO, records: Iterable[Record], checkpoints: Sequence[Checkpoint], erasures: Sequence[Erasure] = ()
) -> int:
    keys = {c.key_id: c.public_key.hex() for c in checkpoints} | {e.key_id: e.public_key.hex() for e in erasures}
    header = {
        "type": "header",
        "format": FORMAT,
        "version": 1,
        "public_keys": [{"key_id": k, "public_key": v} for k, v in sorted(keys.items())],
    }
    out.write(json.dumps(header) + "\n")
    n = 0
    for r in records:
        out.write(json.dumps({"type": "record", **r.as_json()}, ensure_ascii=False) + "\n")
        n += 1
    for c in checkpoints:
        out.write(json.dumps({"type": "checkpoint", **c.as_json()}) + "\n")
    for e in erasures:
        out.write(json.dumps({"type": "erasure", **e.as_json()}, ensure_ascii=False) + "\n")
    return n


def read_export(path: Path) -> tuple[list[Record], list[Checkpoint], set[bytes], list[Erasure]]:
    """Records (in line order), checkpoints, the header's public keys and the erasure records of an export."""
    records: list[Record] = []
    checkpoints: list[Checkpoint] = []
    erasures: list[Erasure] = []
    keys: set[bytes] = set()
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                body = json.loads(line)
                kind = body.get("type")
                if kind == "header":
                    if body.get("format") != FORMAT:
                        raise ConfigurationError(f"{path}: not a {FORMAT} export")
                    keys = {bytes.fromhex(k["public_key"]) for k in body.get("public_keys", [])}
                elif kind == "record":
                    records.append(Record.from_json(body))
                elif kind == "checkpoint":
                    checkpoints.append(Checkpoint.from_json(body))
                elif kind == "erasure":
                    erasures.append(Erasure.from_json(body))
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigurationError(f"{path}:{number}: unreadable line: {exc}") from exc
    return records, checkpoints, keys, erasures
