"""The shipped systemd unit and its environment file: the unit runs `nexus serve` with the file, and the
file names only variables the gateway knows, with the embedded PostgreSQL turned off."""

from __future__ import annotations

import configparser
from pathlib import Path

from nexus.settings import Settings, unknown_variables

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _env_file() -> dict[str, str]:
    lines = (DEPLOY / "nexus.env.example").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {name: value for name, value in pairs}


def test_the_unit_runs_nexus_serve_with_the_environment_file() -> None:
    """deploy/nexus.service starts `nexus serve` as its own user, reads /etc/nexus/nexus.env, stops on SIGTERM."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((DEPLOY / "nexus.service").read_text(encoding="utf-8"))
    service = unit["Service"]
    assert service["ExecStart"].endswith("/bin/nexus serve")
    assert service["EnvironmentFile"] == "/etc/nexus/nexus.env"
    assert (service["User"], service["KillSignal"]) == ("nexus", "SIGTERM")
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_environment_file_is_valid_known_settings_without_the_embedded_database() -> None:
    """Every variable of deploy/nexus.env.example is known and valid, and the embedded server is off."""
    env = _env_file()
    assert unknown_variables(env) == []
    settings = Settings.from_env(env)
    assert settings.embedded_database is False and settings.database_url is not None
    assert settings.bootstrap_key_file is not None and settings.metrics_bind is not None
