"""Loading the decision log (from PostgreSQL or an export file), verifying it, exporting it.

Export format (JSON Lines, UTF-8): a header line
``{"type": "header", "format": "nexus-decision-log", "version": 1, "public_keys": [{"key_id", "public_key"}]}``
(raw Ed25519 public keys in hex), then one ``{"type": "record", ...}`` line per record in storage order
(`Record.as_json`), then one ``{"type": "checkpoint", ...}`` line per checkpoint (`Checkpoint.as_json`).

An archive segment (nexus.audit.archive) is such a file whose header says ``"segment": true``, with
``{"type": "anchor", "kind": "chain", "tenant_id", "order_id", "position", "prev_hash"}`` lines for the chains it
holds from a later position than 1, and one ``{"type": "anchor", "kind": "checkpoints", "prev_digest"}`` line
naming the digest its first checkpoint follows. Verified alone, its heads outside the records it holds are not
checked (they belong to other segments or to the database).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from nexus.audit.signing import signature_checker
from nexus.core.audit_anchor import ArchivedHashes, ChainAnchor, anchor_finding, chain_starts
from nexus.core.audit_chain import GENESIS, Record, format_at
from nexus.core.audit_erasure import Erasure, erased_heads
from nexus.core.audit_verify import Checkpoint, Head, Verification, verify_checkpoints, verify_records
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
    anchors: Sequence[ChainAnchor] = (),
    archived: ArchivedHashes | None = None,
    checkpoint_start: bytes = GENESIS,
    segment: bool = False,
) -> Verification:
    """Recompute every chain (a trimmed one from its anchor), then check every checkpoint against them (a head of
    a chain a trusted erasure record removed, or of an archived record with its hash, is accounted for).

    `anchors` with `archived` (the hashes of the segments they name, each verified alone): the log after trims;
    `segment`: an archive segment alone (its `anchors` name no archive and are not checked against one)."""
    finding, chains = verify_records(records, chain_starts(anchors))
    if finding is None and not segment:
        finding = anchor_finding(anchors, archived or {})
    if finding is None:
        signature_ok = signature_checker(trusted)
        erased = erased_heads(erasures, signature_ok)
        finding = verify_checkpoints(
            checkpoints,
            chains,
            signature_ok,
            complete=complete,
            erased=erased,
            start=checkpoint_start,
            archived=archived,
            segment=segment,
        )
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


@dataclasses.dataclass
class ExportFile:
    """What an export or an archive segment holds."""

    segment: bool = False
    checkpoint_start: bytes = GENESIS
    records: list[Record] = dataclasses.field(default_factory=list)
    checkpoints: list[Checkpoint] = dataclasses.field(default_factory=list)
    keys: set[bytes] = dataclasses.field(default_factory=set)
    erasures: list[Erasure] = dataclasses.field(default_factory=list)
    anchors: list[ChainAnchor] = dataclasses.field(default_factory=list)

    def verify(self, trusted: set[bytes] | None = None, order_id: str | None = None) -> Verification:
        records = [r for r in self.records if r.order_id == order_id] if order_id else self.records
        return verify(
            records,
            self.checkpoints,
            trusted=trusted or self.keys,
            complete=not order_id,
            erasures=self.erasures,
            anchors=self.anchors,
            checkpoint_start=self.checkpoint_start,
            segment=self.segment,
        )


def read_export(path: Path) -> tuple[list[Record], list[Checkpoint], set[bytes], list[Erasure]]:
    """Records (in line order), checkpoints, the header's public keys and the erasure records of an export."""
    f = read_file(path)
    return f.records, f.checkpoints, f.keys, f.erasures


def read_file(path: Path) -> ExportFile:
    """An export or an archive segment, line by line."""
    out = ExportFile()
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                _read_line(path, json.loads(line), out)
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigurationError(f"{path}:{number}: unreadable line: {exc}") from exc
    return out


def _read_line(path: Path, body: Mapping[str, Any], out: ExportFile) -> None:
    kind = body.get("type")
    if kind == "header":
        if body.get("format") != FORMAT:
            raise ConfigurationError(f"{path}: not a {FORMAT} export")
        out.keys = {bytes.fromhex(k["public_key"]) for k in body.get("public_keys", [])}
        out.segment = bool(body.get("segment", False))
    elif kind == "record":
        out.records.append(Record.from_json(body))
    elif kind == "checkpoint":
        out.checkpoints.append(Checkpoint.from_json(body))
    elif kind == "erasure":
        out.erasures.append(Erasure.from_json(body))
    elif kind == "anchor" and body.get("kind") == "checkpoints":
        out.checkpoint_start = bytes.fromhex(body["prev_digest"])
    elif kind == "anchor":
        out.anchors.append(
            ChainAnchor(
                str(body["tenant_id"]),
                str(body["order_id"]),
                int(body["position"]),
                bytes.fromhex(body["prev_hash"]),
                archive="",
                whole=False,
            )
        )
