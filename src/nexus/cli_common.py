"""The flags every command shares, and the settings they give.

Subcommand modules import these from here, never from a router, so no module imports the command that
routes to it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nexus.settings import Settings


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
