"""The flags every command shares, and the settings they give.

Subcommand modules import these from here, never from a router, so no module imports the command that
routes to it."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nexus.settings import Settings

if TYPE_CHECKING:
    from nexus.store.database import Database

T = TypeVar("T")


COMMON_FLAGS = {"--data-dir": "data_dir", "--database-url": "database_url", "--log-level": "log_level"}
"""The flags every command accepts, anywhere on its line (the router takes them out), by destination."""


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help="embedded PostgreSQL data (default .nexus/)")
    parser.add_argument("--database-url", default=None, help="PostgreSQL URL (default: NEXUS_DATABASE_URL)")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default INFO)")


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    return Settings.from_env(
        data_dir=getattr(args, "data_dir", None),
        database_url=getattr(args, "database_url", None),
        log_level=getattr(args, "log_level", None),
        **extra,
    )


def missing_database(settings: Settings) -> str | None:
    """None when there is a database to open: a PostgreSQL URL, or an embedded data directory a server
    initialised. Otherwise one line naming the path looked at and how to get one, for the commands that
    read or administer rows and must never initialise an empty database nobody serves."""
    if settings.database_url:
        return None
    pgdata = (Path(settings.data_dir) / "pgdata").resolve()
    if (pgdata / "PG_VERSION").is_file():
        return None
    return (
        f"no database at {pgdata} (start one with `nexus serve`, or point at yours with --data-dir DIR, "
        "NEXUS_DATA_DIR or NEXUS_DATABASE_URL)"
    )


def with_database(settings: Settings, action: Callable[[Database], Awaitable[T]], *, migrate: bool = True) -> T:
    """Open the database, run `action` on it, close it: the body of a command that reads or writes rows."""
    from nexus.store.database import Database

    async def go() -> T:
        db = await Database(settings).open(migrate=migrate)
        try:
            return await action(db)
        finally:
            await db.close()

    return asyncio.run(go())


def run_json_action(args: argparse.Namespace, action: Callable[[Database], Awaitable[Any]]) -> int:
    """Run `action` on the database and print its result as JSON (exit 0), or a refusal's code and
    message as JSON (exit 1): the admin commands whose output a script reads."""
    from nexus.errors import NexusError

    try:
        result = with_database(settings_from(args), action)
    except NexusError as exc:
        print(json.dumps({"code": exc.code.value, "message": exc.message}))
        return 1
    print(json.dumps(result, indent=2, default=str))
    return 0
