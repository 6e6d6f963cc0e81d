"""A streaming replica of the gateway's PostgreSQL, made and run with the server's own tools.

`make_standby` copies a running primary (embedded or not) with `pg_basebackup` from the pgserver wheel, through
a physical replication slot named after the standby (so the primary keeps every WAL segment the standby has
not received, however long it is away), and writes `standby.signal` and the connection back to the primary
with the standby's `application_name`: the name a primary lists in `synchronous_standby_names`
(`NEXUS_SYNC_STANDBY`) to wait for it on every commit. `run_standby` runs the server in the foreground (as the
pgserver wheel's system user when started as root, since PostgreSQL refuses root), listening on a Unix socket in
the data directory and, if asked, on a TCP address; `promote` makes it a primary.

The data directory is laid out as the embedded server's is (`DIR/pgdata`), so after a promotion the same
directory serves `nexus serve --data-dir DIR` like any embedded database.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

from nexus.errors import ConfigurationError

_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")
DEFAULT_PORT = 5432


@dataclasses.dataclass(frozen=True, slots=True)
class Standby:
    """A standby's data directory and where it listens."""

    data_dir: Path
    port: int = DEFAULT_PORT
    host: str = ""

    @property
    def pgdata(self) -> Path:
        return self.data_dir.resolve() / "pgdata"

    @property
    def socket_dir(self) -> Path:
        return self.pgdata

    def url(self, database: str = "postgres") -> str:
        """The URL clients use: the TCP address if it listens on one, else its Unix socket."""
        if self.host:
            return f"postgresql://postgres@{self.host}:{self.port}/{database}"
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={self.port}"


def slot_name(application_name: str) -> str:
    """The replication slot of a standby: its name, lower-cased, as PostgreSQL's slot names allow."""
    slot = re.sub(r"[^a-z0-9_]", "_", application_name.lower())
    if not _SLOT_NAME.fullmatch(slot):
        raise ConfigurationError(f"standby name {application_name!r} makes no valid slot name (1-63 of a-z0-9_)")
    return slot


def make_standby(primary_url: str, standby: Standby, application_name: str) -> None:
    """Copy the primary into `standby.pgdata` and set it to follow the primary (refuses a non-empty directory)."""
    if standby.pgdata.exists() and any(standby.pgdata.iterdir()):
        raise ConfigurationError(f"{standby.pgdata} is not empty: a standby is made into a new directory")
    standby.pgdata.mkdir(parents=True, exist_ok=True)
    _own(standby.data_dir.resolve())
    _own(standby.pgdata)
    standby.pgdata.chmod(0o700)
    slot = slot_name(application_name)
    _run(
        "pg_basebackup",
        [
            *("--pgdata", str(standby.pgdata), "--dbname", primary_url, "--wal-method=stream"),
            *("--write-recovery-conf", "--create-slot", "--slot", slot, "--checkpoint=fast", "--no-password"),
        ],
    )
    # The primary's socket lock and pgserver's list of its users came along with its directory: not ours.
    for stale in [*standby.pgdata.glob(".s.PGSQL.*"), standby.pgdata / ".handle_pids.json"]:
        stale.unlink(missing_ok=True)
    # pg_basebackup -R wrote the primary's connection; name the standby in it, as the primary will know it.
    with (standby.pgdata / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"primary_conninfo = '{_conninfo(primary_url)} application_name={application_name}'\n")
        conf.write(f"primary_slot_name = '{slot}'\n")
        conf.write("hot_standby = on\n")


def run_standby(standby: Standby) -> subprocess.Popen[bytes]:
    """Start the standby's server (or a promoted one) as a child process; the caller waits on it."""
    args = [str(_bin("postgres")), "-D", str(standby.pgdata), "-k", str(standby.socket_dir)]
    args += ["-p", str(standby.port), "-h", standby.host]
    return subprocess.Popen(args, user=_system_user(), stdin=subprocess.DEVNULL)  # noqa: S603 - our own binary


def promote(data_dir: Path) -> None:
    """Promote the standby in `data_dir` to a primary and wait until it accepts writes."""
    pgdata = data_dir.resolve() / "pgdata"
    if not (pgdata / "standby.signal").exists():
        raise ConfigurationError(f"{pgdata} is not a standby (no standby.signal)")
    _run("pg_ctl", ["promote", "-D", str(pgdata), "-w", "-t", "60"])


def _conninfo(url: str) -> str:
    """The primary's URL as a libpq conninfo string (key=value), which primary_conninfo reads."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    parts = urlsplit(url)
    pairs: dict[str, str] = {}
    if parts.username:
        pairs["user"] = unquote(parts.username)
    if parts.password:
        pairs["password"] = unquote(parts.password)
    if parts.hostname:
        pairs["host"] = parts.hostname
    if parts.port:
        pairs["port"] = str(parts.port)
    pairs.update(parse_qsl(parts.query))
    return " ".join(f"{key}={_quote(value)}" for key, value in pairs.items() if key != "target_session_attrs")


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'" if (not value or " " in value) else value


def _bin(name: str) -> Path:
    import warnings

    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); its /tmp fallback is fine
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / name


def _system_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, the pgserver wheel's user runs it (as for the embedded one)."""
    return "pgserver" if os.geteuid() == 0 else None


def _own(path: Path) -> None:
    user = _system_user()
    if user is None:
        return
    import pwd

    from pgserver.utils import ensure_user_exists

    ensure_user_exists(user)
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(tool: str, args: list[str]) -> None:
    done = subprocess.run(  # noqa: S603 - the wheel's own binaries, arguments from the operator
        [str(_bin(tool)), *args], user=_system_user(), capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode != 0:
        raise ConfigurationError(f"{tool} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
