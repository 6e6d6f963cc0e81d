"""Where the bootstrap admin key goes: `NEXUS_BOOTSTRAP_KEY_FILE`, else `<data_dir>/admin.key`, or nowhere."""

from __future__ import annotations

from pathlib import Path

from nexus.auth.keys import bootstrap_admin_key, bootstrap_key_path, hash_key
from nexus.settings import Settings
from nexus.store.database import Database


def test_the_key_file_follows_the_setting(tmp_path: Path) -> None:
    """Unset: <data_dir>/admin.key; a path: that path; `none` (any case): no file at all."""
    s = Settings(data_dir=tmp_path / "data")
    assert bootstrap_key_path(s) == tmp_path / "data" / "admin.key"
    assert bootstrap_key_path(s.replace(bootstrap_key_file=str(tmp_path / "keys" / "a"))) == tmp_path / "keys" / "a"
    assert bootstrap_key_path(s.replace(bootstrap_key_file="None")) is None


async def test_a_database_without_keys_gets_one_written_where_asked_or_none(db: Database, tmp_path: Path) -> None:
    """On an empty key table: with no place, no key is created; with a path, the key is written there (0600)
    and is the only key of the database."""
    await db.execute("DELETE FROM api_keys")
    assert await bootstrap_admin_key(db, None) is None
    assert await db.fetchval("SELECT count(*) FROM api_keys") == 0
    path = tmp_path / "secrets" / "nexus-admin.key"
    assert await bootstrap_admin_key(db, path) == path
    assert path.stat().st_mode & 0o777 == 0o600
    key = path.read_text().strip()
    assert await db.fetchval("SELECT count(*) FROM api_keys WHERE key_hash = $1", hash_key(key)) == 1
    assert await bootstrap_admin_key(db, tmp_path / "second.key") is None  # keys exist now
