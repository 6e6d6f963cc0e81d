"""The embedded PostgreSQL 16 (the `pgserver` wheel): what runs when no NEXUS_DATABASE_URL is given.

The server listens on a Unix socket only. Several processes may share one data directory: pgserver
starts the server once and counts its users (their pids, in ``pgdata/.handle_pids.json``); the last
user to leave stops it.

A user that died without leaving (SIGKILL, OOM) stays on that list, and the server it leaves running
would never be stopped: the next process would join it, count the dead user as still there, and leave
it running at its own clean stop. So before joining, users that no longer exist are struck off (under
pgserver's lock): whoever adopts a server left by a crash owns it, and stops it when it stops.

The server writes its WAL with `WAL_SETTINGS` (set at each start with ALTER SYSTEM where they differ, then a
reload; docs/deploy.md says why and what to set on a PostgreSQL of your own). Durability is PostgreSQL's
default: every commit is flushed before it is acknowledged, and full-page writes stay on.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import psutil

from nexus.store.queries import query

log = logging.getLogger(__name__)

# How the embedded server writes its WAL (issue 34: a tenant's 1,000-envelope batches fill ~2 KB of WAL per
# new order, and every other tenant's commit waits for that WAL's flush). None of them trades durability.
WAL_SETTINGS: dict[str, str] = {
    # a new 16 MB segment is not zero-filled first (`IO:WALInitWrite` inside a commit's flush) ...
    "wal_init_zero": "off",
    # ... and one of 256 MB of old segments is usually there to recycle instead
    "min_wal_size": "256MB",
    # fewer checkpoints under a heavy writer (each one restarts the full-page images: a page's first change
    # after it writes the whole 8 KB page) ...
    "max_wal_size": "2GB",
    "checkpoint_timeout": "15min",
    # ... and those images compressed (the pgserver build has pglz only, no lz4 nor zstd)
    "wal_compression": "pglz",
}


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives under `data_dir/pgdata`."""

    def __init__(self, data_dir: Path, *, cleanup_mode: str | None = "stop") -> None:
        self.pgdata = (Path(data_dir) / "pgdata").resolve()
        self._cleanup_mode = cleanup_mode
        self._server: Any = None

    def start(self) -> str:
        """Start (or join) the server and return its URL."""
        import warnings

        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); its /tmp fallback is fine
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pgserver  # heavy import, only where the embedded server is used

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        from pgserver.postgres_server import PostgresServer

        with PostgresServer._lock:
            dead = forget_dead_users(self.pgdata)
        if dead:
            log.info(
                "adopting the embedded postgres of a process that died",
                extra={"action": "embedded_pg_adopt", "pgdata": str(self.pgdata), "dead_pids": dead},
            )
        get_server = pgserver.get_server  # type: ignore[attr-defined]  # pgserver does not export its names in __all__
        self._server = get_server(self.pgdata, cleanup_mode=self._cleanup_mode)
        url: str = self._server.get_uri()
        configure_wal(url)
        log.info("embedded postgres ready", extra={"action": "embedded_pg_start", "pgdata": str(self.pgdata)})
        return url

    def url(self, database: str | None = None) -> str:
        assert self._server is not None, "start() first"
        result: str = self._server.get_uri(database)
        return result

    def stop_server(self) -> None:
        """Stop the server process now (fast shutdown), as an outage would. `resume()` brings it back."""
        import pgserver

        assert self._server is not None
        pgserver.pg_ctl(  # type: ignore[attr-defined]  # pgserver does not export its names in __all__
            ["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._server.system_user
        )

    def resume(self) -> None:
        """Start the server again after `stop_server()`, on the same socket."""
        assert self._server is not None
        with self._server._lock:
            self._server.ensure_postgres_running()

    def close(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None


def configure_wal(url: str) -> None:
    """Give the server at `url` the `WAL_SETTINGS` that it does not have yet (each takes effect on reload).

    A failure is logged, not raised: the server works without them, only slower under heavy writers."""
    from pgserver._commands import POSTGRES_BIN_PATH

    psql = [str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-o", "/dev/null"]
    try:
        subprocess.run(  # noqa: S603 - pgserver's own psql, our own script
            [*psql, "-v", f"wanted={json.dumps(WAL_SETTINGS)}", "-d", url],
            input=query("embedded.sql", "configure_wal"), text=True, check=True, capture_output=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", None) or ""
        log.warning(
            "embedded postgres WAL settings not applied",
            extra={"action": "embedded_pg_wal_settings", "error": f"{exc} {stderr}".strip()},
        )


def forget_dead_users(pgdata: Path) -> list[int]:
    """Strike the processes that no longer exist off pgserver's list of the server's users; return them.

    Call under pgserver's inter-process lock. A zombie (killed, not yet reaped) counts as dead.
    """
    handles = pgdata / ".handle_pids.json"
    try:
        pids: list[int] = json.loads(handles.read_text())
    except (FileNotFoundError, ValueError):
        return []
    dead = [pid for pid in pids if not _alive(pid)]
    if dead:
        handles.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    return dead


def _alive(pid: int) -> bool:
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    return bool(status != psutil.STATUS_ZOMBIE)
