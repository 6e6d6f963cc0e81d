"""Settings: NEXUS_* variables, flags over variables, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus.errors import ConfigurationError
from nexus.settings import _ENV_NAMES, Settings, env_name


def test_every_field_has_its_public_variable() -> None:
    """Each setting is read from NEXUS_ + its name in capitals, and _ENV_NAMES lists exactly those."""
    assert set(_ENV_NAMES) == set(Settings.model_fields)
    for field, var in _ENV_NAMES.items():
        assert var == env_name(field)


def test_variables_are_converted_by_type() -> None:
    """Integers, floats and paths arrive typed; an empty variable counts as unset."""
    s = Settings.from_env(
        {"NEXUS_HTTP_PORT": "9001", "NEXUS_LEASE_S": "2.5", "NEXUS_DATA_DIR": "/srv/nexus", "NEXUS_WEBHOOK_URL": ""}
    )
    assert (s.http_port, s.lease_s, s.data_dir, s.webhook_url) == (9001, 2.5, Path("/srv/nexus"), None)


def test_flags_override_variables() -> None:
    """A flag given (not None) wins over its variable; a flag left None keeps the variable's value."""
    env = {"NEXUS_HTTP_PORT": "9001", "NEXUS_HTTP_HOST": "10.0.0.1"}
    s = Settings.from_env(env, http_port=7000, http_host=None)
    assert (s.http_port, s.http_host) == (7000, "10.0.0.1")


@pytest.mark.parametrize(
    ("var", "value"),
    [("NEXUS_HTTP_PORT", "abc"), ("NEXUS_LEASE_S", "soon"), ("NEXUS_MAX_ATTEMPTS", "1.5")],
)
def test_a_bad_variable_is_named(var: str, value: str) -> None:
    """A malformed value fails with a ConfigurationError that names the variable and the value."""
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({var: value})
    assert var in str(caught.value)
    assert repr(value) in str(caught.value)


def test_a_bad_flag_is_named_as_a_setting() -> None:
    """A malformed flag value names the setting (no variable was involved)."""
    with pytest.raises(ConfigurationError, match="setting http_port"):
        Settings.from_env({}, http_port="eighty")


def test_unknown_override_is_refused() -> None:
    """An override naming no setting is a programming error caught at once."""
    with pytest.raises(ConfigurationError, match="unknown setting"):
        Settings.from_env({}, http_prot=1)


def test_direct_construction_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings(...) takes only what it is given: the environment is read by from_env alone."""
    monkeypatch.setenv("NEXUS_HTTP_PORT", "9999")
    assert Settings().http_port == 8080
    assert Settings.from_env().http_port == 9999


def test_settings_are_frozen_and_replace_validates() -> None:
    """Settings cannot be changed in place; replace() returns a validated copy."""
    s = Settings()
    with pytest.raises(ValueError, match="frozen"):
        s.http_port = 1  # type: ignore[misc]
    assert s.replace(http_port=1).http_port == 1
    with pytest.raises(ConfigurationError, match="http_port"):
        s.replace(http_port="x")


def test_to_env_round_trips() -> None:
    """to_env() gives the variables from which from_env() rebuilds the same settings."""
    s = Settings(http_port=1234, data_dir=Path("/d"), lease_s=0.5, webhook_url="http://x/")
    assert Settings.from_env(s.to_env()) == s


def test_workers_default_to_one_and_divide_the_rate_limits_unless_told_otherwise() -> None:
    """issue 17: NEXUS_WORKERS (>= 1, default 1) is the divisor of every rate limit unless
    NEXUS_RATE_LIMIT_PROCESSES is set."""
    from nexus.ingress.http import rate_limits

    assert Settings.from_env({}).workers == 1
    assert rate_limits(Settings.from_env({"NEXUS_WORKERS": "4"})).processes == 4
    assert rate_limits(Settings.from_env({"NEXUS_WORKERS": "4", "NEXUS_RATE_LIMIT_PROCESSES": "6"})).processes == 6
    assert rate_limits(Settings.from_env({}, workers=2)).processes == 2
    with pytest.raises(ConfigurationError, match="NEXUS_WORKERS"):
        Settings.from_env({"NEXUS_WORKERS": "0"})
