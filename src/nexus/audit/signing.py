"""Signed checkpoints of the decision log: the Ed25519 key, writing a checkpoint, the periodic task.

The key is `NEXUS_AUDIT_SIGNING_KEY` (base64 of the raw 32-byte Ed25519 seed, or a PKCS#8 PEM), else the
file `<data dir>/audit_ed25519.key` (PKCS#8 PEM), generated on first use with mode 0600.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime as dt
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from nexus.core.audit_chain import GENESIS, format_at
from nexus.core.audit_verify import Checkpoint, Head, checkpoint_digest, key_id
from nexus.errors import ConfigurationError
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

log = logging.getLogger(__name__)

KEY_FILE = "audit_ed25519.key"
# One checkpoint writer at a time, whatever the number of gateway processes (session-level try-lock).
_CHECKPOINT_LOCK = 0x6E657863  # "nexc"


def parse_signing_key(text: str) -> Ed25519PrivateKey:
    """A key given as base64 of the raw 32-byte seed, or as a PKCS#8 PEM."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except ValueError as exc:
            raise ConfigurationError(f"NEXUS_AUDIT_SIGNING_KEY: not a readable PEM private key: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError("NEXUS_AUDIT_SIGNING_KEY: the PEM key is not an Ed25519 key")
        return key
    try:
        seed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigurationError("NEXUS_AUDIT_SIGNING_KEY: neither a PEM key nor base64") from exc
    if len(seed) != 32:
        raise ConfigurationError(f"NEXUS_AUDIT_SIGNING_KEY: an Ed25519 seed is 32 bytes, got {len(seed)}")
    return Ed25519PrivateKey.from_private_bytes(seed)


def load_signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The configured key, or the data directory's (created once, readable by its owner only)."""
    if settings.audit_signing_key:
        return parse_signing_key(settings.audit_signing_key)
    path = Path(settings.data_dir) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first: use theirs
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
            log.info("audit signing key generated", extra={"action": "audit_key", "path": str(path)})
    return parse_signing_key(path.read_text(encoding="utf-8"))


def public_bytes(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def signature_checker(trusted: set[bytes] | None = None) -> Callable[[Checkpoint], bool]:
    """`signature_ok(checkpoint)` for core.audit_verify.verify_checkpoints: the signature verifies with the
    checkpoint's public key, and (given `trusted` raw public keys) that key is trusted."""

    def signature_ok(c: Checkpoint) -> bool:
        if trusted is not None and c.public_key not in trusted:
            return False
        if key_id(c.public_key) != c.key_id:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(c.public_key).verify(c.signature, c.digest)
        except (InvalidSignature, ValueError):
            return False
        return True

    return signature_ok


def sign(key: Ed25519PrivateKey, at: dt.datetime, prev_digest: bytes, heads: list[Head]) -> Checkpoint:
    stamp, ordered = format_at(at), sorted(heads, key=lambda h: (h.tenant_id, h.order_id))
    digest = checkpoint_digest(stamp, prev_digest, ordered)
    return Checkpoint(stamp, tuple(ordered), digest, *signature_of(key, digest), prev_digest=prev_digest)


def signature_of(key: Ed25519PrivateKey, digest: bytes) -> tuple[bytes, str, bytes]:
    """The signature over `digest`, the key's id and its raw public key (a checkpoint's or an erasure's)."""
    public = public_bytes(key)
    return key.sign(digest), key_id(public), public


async def write_checkpoint(db: Database, key: Ed25519PrivateKey) -> Checkpoint | None:
    """Sign and store a checkpoint of the chain heads changed since the previous one; None if nothing
    changed or another process is writing one right now."""
    with wrap_db_errors():
        async with db.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _CHECKPOINT_LOCK):
                return None
            try:
                # One snapshot for "what the previous checkpoint saw" and "the heads now".
                async with conn.transaction(isolation="repeatable_read"):
                    last = await conn.fetchrow(query("audit.sql", "last_checkpoint"))
                    now = await conn.fetchrow(query("audit.sql", "current_snapshot"))
                    rows = await conn.fetch(query("audit.sql", "changed_heads"), last["snapshot"] if last else None)
                    if not rows:
                        return None
                    heads = [Head(r["tenant_id"], r["order_id"], r["position"], bytes(r["hash"])) for r in rows]
                    at: dt.datetime = now["at"]
                    checkpoint = sign(key, at, bytes(last["digest"]) if last else GENESIS, heads)
                    checkpoint_id = await conn.fetchval(
                        query("audit.sql", "insert_checkpoint"),
                        at,
                        now["snapshot"],
                        checkpoint.prev_digest,
                        json.dumps([h.as_json() for h in checkpoint.heads]),
                        checkpoint.digest,
                        checkpoint.signature,
                        checkpoint.key_id,
                        checkpoint.public_key,
                    )
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _CHECKPOINT_LOCK)
    log.info(
        "audit checkpoint signed",
        extra={"action": "audit_checkpoint", "checkpoint_id": checkpoint_id, "heads": len(heads)},
    )
    return dataclasses.replace(checkpoint, id=checkpoint_id)


async def checkpoint_loop(db: Database, settings: Settings, key: Ed25519PrivateKey) -> None:
    """`nexus serve`'s background task: a checkpoint every `audit_checkpoint_s`, forever."""
    while True:
        await asyncio.sleep(settings.audit_checkpoint_s)
        try:
            await write_checkpoint(db, key)
        except Exception:
            log.warning("audit checkpoint failed", exc_info=True, extra={"action": "audit_checkpoint"})
