"""Settings: NEXUS_* variables, flags over variables, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus.errors import ConfigurationError
from nexus.settings import Settings, env_name, otel_variables
from nexus_wire.kafka_security import SECURITY_VARIABLES

# Every variable of the gateway's settings, written out: they are public (docs, deployments, scripts), so
# none may be renamed or dropped, and a new setting is added here on purpose.
PUBLIC_VARIABLES = [
    "NEXUS_AUDIT_ARCHIVE_DIR",
    "NEXUS_RETENTION_S",
    "NEXUS_RETENTION_SWEEP_S",
    "NEXUS_QUOTA_LIVE_ORDERS",
    "NEXUS_QUOTA_UNSTARTED_PLANS",
    "NEXUS_QUOTA_BUFFERED_STEPS",
    "NEXUS_QUOTA_DEAD_LETTERS",
    "NEXUS_QUOTA_ACTIVE_KEYS",
    "NEXUS_QUOTA_REFRESH_S",
    "NEXUS_METRICS_MAX_TENANTS",
    "NEXUS_REMOVED_ORDER_MEMORY_S",
    "NEXUS_RETENTION_BATCH",
    "NEXUS_RETENTION_DUTY",
    "NEXUS_REPEAT_WINDOW_S",
    "NEXUS_MCP_ALLOWED_ORIGINS",
    "NEXUS_PUBLIC_URL",
    "NEXUS_OAUTH_ISSUERS",
    "NEXUS_OAUTH_TENANT_CLAIM",
    "NEXUS_OAUTH_ROLES_CLAIM",
    "NEXUS_OAUTH_JWKS_TTL_S",
    "NEXUS_OAUTH_JWKS_REFETCH_S",
    "NEXUS_OAUTH_FETCH_TIMEOUT_S",
    "NEXUS_DELIVERY_MAX_INFLIGHT_PER_TENANT",
    "NEXUS_DELIVERY_MAX_INFLIGHT_PER_SUBSCRIPTION",
    "NEXUS_MAX_WAITS_PER_KEY",
    "NEXUS_MAX_WAITS_PER_TENANT",
    "NEXUS_MAX_REQUESTS_PER_TENANT",
    "NEXUS_PROCESSING_SLOTS",
    "NEXUS_MAX_REQUESTS_UNAUTHENTICATED",
    "NEXUS_HTTP_HEAD_TIMEOUT_S",
    "NEXUS_AUTH_FAILURES_PER_MINUTE",
    "NEXUS_CONSOLE_SECURE",
    "NEXUS_DATABASE_URL",
    "NEXUS_EMBEDDED_DATABASE",
    "NEXUS_BOOTSTRAP_KEY_FILE",
    "NEXUS_DATA_DIR",
    "NEXUS_HTTP_HOST",
    "NEXUS_HTTP_PORT",
    "NEXUS_KAFKA_BOOTSTRAP",
    "NEXUS_KAFKA_TOPIC",
    "NEXUS_KAFKA_DLQ_TOPIC",
    "NEXUS_KAFKA_GROUP",
    "NEXUS_KAFKA_MAX_POLL_RECORDS",
    "NEXUS_KAFKA_POLL_TIMEOUT_MS",
    "NEXUS_KAFKA_REVOKE_WAIT_S",
    "NEXUS_KAFKA_SESSION_TIMEOUT_MS",
    "NEXUS_KAFKA_HEARTBEAT_INTERVAL_MS",
    "NEXUS_KAFKA_MAX_POLL_INTERVAL_MS",
    "NEXUS_KAFKA_SECURITY_PROTOCOL",
    "NEXUS_KAFKA_SASL_MECHANISM",
    "NEXUS_KAFKA_SASL_USERNAME",
    "NEXUS_KAFKA_SASL_PASSWORD",
    "NEXUS_KAFKA_SSL_CAFILE",
    "NEXUS_KAFKA_SSL_CERTFILE",
    "NEXUS_KAFKA_SSL_KEYFILE",
    "NEXUS_BUFFER_TIMEOUT_S",
    "NEXUS_BUFFER_SWEEP_INTERVAL_S",
    "NEXUS_WEBHOOK_URL",
    "NEXUS_WEBHOOK_SECRET",
    "NEXUS_WEBHOOK_WORKERS",
    "NEXUS_WEBHOOK_TIMEOUT_S",
    "NEXUS_RETRY_BASE_MS",
    "NEXUS_RETRY_MAX_MS",
    "NEXUS_MAX_ATTEMPTS",
    "NEXUS_LEASE_S",
    "NEXUS_BREAKER_THRESHOLD",
    "NEXUS_BREAKER_COOLDOWN_S",
    "NEXUS_DISPATCHER_POLL_S",
    "NEXUS_DISPATCHER_GAUGES_S",
    "NEXUS_DISPATCHER_STOP_FLUSH_S",
    "NEXUS_BATCH_MAX_EVENTS",
    "NEXUS_BATCH_WINDOW_MS",
    "NEXUS_BATCH_WORKERS",
    "NEXUS_BATCH_TENANT_EVENTS",
    "NEXUS_BATCH_TENANT_EVENTS_CONTENDED",
    "NEXUS_HEAVY_DUTY",
    "NEXUS_DB_POOL_SIZE",
    "NEXUS_DB_CONNECTIONS_PER_TENANT",
    "NEXUS_LOG_LEVEL",
    "NEXUS_KAFKA_RECONNECT_MAX_MS",
    "NEXUS_LISTEN_RETRY_S",
    "NEXUS_LISTEN_CHECK_S",
    "NEXUS_MAX_BODY_BYTES",
    "NEXUS_MAX_EVENTS_PER_REQUEST",
    "NEXUS_MAX_NESTING_DEPTH",
    "NEXUS_MAX_STRING_LENGTH",
    "NEXUS_PARSE_IN_THREAD_BYTES",
    "NEXUS_FOLD_THREAD_WEIGHT",
    "NEXUS_FOLD_THREAD_SWITCH_MS",
    "NEXUS_HEAVY_DB_CONNECTIONS",
    "NEXUS_HTTP_LIMIT_CONCURRENCY",
    "NEXUS_HTTP_MAX_CONNECTIONS",
    "NEXUS_HTTP_HEADS_PER_TURN",
    "NEXUS_RATE_LIMIT_TENANT",
    "NEXUS_HTTP_KEEP_ALIVE_S",
    "NEXUS_HTTP_READ_TIMEOUT_S",
    "NEXUS_HTTP_BACKLOG",
    "NEXUS_HTTP_MAX_HEAD_BYTES",
    "NEXUS_METRICS_MAX_SUBSCRIPTIONS",
    "NEXUS_PROCESS_DIR",
    "NEXUS_DEFAULT_MAX_ORDER_AMOUNT",
    "NEXUS_AUDIT_CHECKPOINT_S",
    "NEXUS_AUDIT_SIGNING_KEY",
    "NEXUS_AUTH_CACHE_TTL_S",
    "NEXUS_METRICS_BIND",
    "NEXUS_KAFKA_TENANT",
    "NEXUS_ALLOW_PRIVATE_URLS",
    "NEXUS_RATE_LIMIT_AGENT",
    "NEXUS_RATE_LIMIT_OPERATOR",
    "NEXUS_RATE_LIMIT_APPROVER",
    "NEXUS_RATE_LIMIT_ADMIN",
    "NEXUS_RATE_LIMIT_PROCESSES",
    "NEXUS_CONSOLE_SESSION_TTL_S",
    "NEXUS_CONSOLE_PAGE_SIZE",
    "NEXUS_SERVICE_URLS",
    "NEXUS_SAGA_SECRET",
    "NEXUS_SAGA_EXECUTORS",
    "NEXUS_SAGA_MAX_INFLIGHT_PER_SERVICE",
    "NEXUS_SAGA_POLL_S",
    "NEXUS_SAGA_LEASE_S",
    "NEXUS_SAGA_CALL_TIMEOUT_S",
    "NEXUS_SAGA_RETRY_BASE_MS",
    "NEXUS_SAGA_RETRY_BUDGET_S",
    "NEXUS_SAGA_RETRY_MAX_MS",
    "NEXUS_SAGA_MAX_ATTEMPTS",
    "NEXUS_SAGA_BREAKER_THRESHOLD",
    "NEXUS_SAGA_BREAKER_COOLDOWN_S",
    "NEXUS_SAGA_LISTEN",
    "NEXUS_DELIVERY_ATTEMPTS_RETENTION_S",
    "NEXUS_DELIVERY_ATTEMPTS_PRUNE_S",
    "NEXUS_CONSOLE_POLL_S",
    "NEXUS_WAIT_MAX_S",
    "NEXUS_STREAM_KEEPALIVE_S",
    "NEXUS_DEADLINE_SWEEP_S",
    "NEXUS_PLAN_START_TIMEOUT_S",
    "NEXUS_APPROVAL_SWEEP_S",
    "NEXUS_DECISIONS_TOPIC",
    "NEXUS_DECISIONS_RELAY_POLL_S",
    "NEXUS_SYNC_STANDBY",
    "NEXUS_KAFKA_LANES",
    "NEXUS_KAFKA_SLICE_MS",
    "NEXUS_WORKERS",
    "NEXUS_WORKERS_STOP_S",
    "NEXUS_DRAIN_GRACE_S",
    "NEXUS_DRAIN_TIMEOUT_S",
]


def _other_value(field: str) -> tuple[str, object]:
    """A variable's text for `field` different from its default, and the value it must become."""
    default = Settings.model_fields[field].default
    annotation = str(Settings.model_fields[field].annotation)
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, int):
        return str(default + 1), default + 1
    if isinstance(default, float):
        return str(default + 0.5), default + 0.5
    if isinstance(default, Path) or "Path" in annotation:
        return "/srv/elsewhere", Path("/srv/elsewhere")
    if "int" in annotation:
        return "3", 3
    return "some-value", "some-value"


def test_every_public_variable_sets_its_field_and_no_other_exists() -> None:
    """pydantic-settings (env_prefix NEXUS_) derives exactly the public variables, and each one, given alone,
    sets its own field to the value given (NEXUS_WEBHOOK_TIMEOUT_S and NEXUS_SAGA_CALL_TIMEOUT_S apart)."""
    assert sorted(env_name(field) for field in Settings.model_fields) == sorted(PUBLIC_VARIABLES)
    defaults = Settings()
    for var in PUBLIC_VARIABLES:
        if var in SECURITY_VARIABLES.values():  # valid only together: tests/unit/test_kafka_security.py
            continue
        if var == "NEXUS_PUBLIC_URL":  # valid only with an issuer: test_a_public_url_turns_oauth_on_with_issuers
            continue
        field = var.removeprefix("NEXUS_").lower()
        text, value = _other_value(field)
        changed = {k for k, v in Settings.from_env({var: text}).model_dump().items() if v != getattr(defaults, k)}
        assert changed == {field}, var
        assert getattr(Settings.from_env({var: text}), field) == value, var


def test_a_public_url_turns_oauth_on_with_issuers() -> None:
    """NEXUS_PUBLIC_URL (a URL) needs NEXUS_OAUTH_ISSUERS: alone it is refused, naming both variables; the
    issuers read without trailing slashes."""
    with pytest.raises(ConfigurationError, match="NEXUS_OAUTH_ISSUERS"):
        Settings.from_env({"NEXUS_PUBLIC_URL": "https://gateway.example"})
    with pytest.raises(ConfigurationError, match="NEXUS_PUBLIC_URL"):
        Settings.from_env({"NEXUS_PUBLIC_URL": "gateway.example", "NEXUS_OAUTH_ISSUERS": "https://id.example"})
    s = Settings.from_env({"NEXUS_PUBLIC_URL": "https://gw.example", "NEXUS_OAUTH_ISSUERS": "https://a/, https://b"})
    assert (s.public_url, s.issuer_urls()) == ("https://gw.example", ("https://a", "https://b"))


def test_service_url_variables_are_merged_into_the_service_urls() -> None:
    """NEXUS_SERVICE_<NAME>_URL (any name, not a field) adds to NEXUS_SERVICE_URLS, and wins for its name."""
    s = Settings.from_env(
        {"NEXUS_SERVICE_URLS": "payment=http://a,shipping=http://s", "NEXUS_SERVICE_PAYMENT_URL": "http://p/"}
    )
    assert (s.service_url("payment"), s.service_url("shipping"), s.service_url("inventory")) == (
        "http://p",
        "http://s",
        None,
    )


def test_the_gateway_has_no_llm_settings_and_reads_otel_only_for_the_sdk() -> None:
    """NEXUS_LLM_* belong to the lab's planner (nexus_lab.llm.settings): the gateway ignores them; OTEL_* are
    handed to tracing as they are."""
    s = Settings.from_env({"NEXUS_LLM_MODEL": "m", "NEXUS_LLM_API_KEY": "k"})
    assert s == Settings() and not any(f.startswith("llm_") for f in Settings.model_fields)
    assert otel_variables({"OTEL_SERVICE_NAME": "x", "NEXUS_HTTP_PORT": "1"}) == {"OTEL_SERVICE_NAME": "x"}


def test_the_variables_the_gateway_does_not_read_keep_their_names_with_their_owners() -> None:
    """NEXUS_LLM_BASE_URL, NEXUS_LLM_MODEL and NEXUS_LLM_API_KEY (once unused fields of the gateway's settings)
    are the lab planner's; NEXUS_GATEWAY_URL and NEXUS_API_KEY the SDK's: each is still read, by its owner."""
    from nexus_client import ClientConfig
    from nexus_lab.llm import settings as llm_settings

    llm = llm_settings.from_env(
        {"NEXUS_LLM_BASE_URL": "http://model", "NEXUS_LLM_MODEL": "m", "NEXUS_LLM_API_KEY": "k"}
    )
    assert (llm.base_url, llm.model, llm.api_key) == ("http://model", "m", "k")
    client = ClientConfig.from_env({"NEXUS_GATEWAY_URL": "http://gw:1", "NEXUS_API_KEY": "nxk_x"})
    assert (str(client.gateway_url).rstrip("/"), client.api_key) == ("http://gw:1", "nxk_x")


def test_nothing_but_settings_reads_the_environment() -> None:
    """No module of the gateway but settings.py reads os.environ or getenv; workers.py only sets the metrics
    directory for its children (the approvals CLI's default name comes from getpass)."""
    root = Path(__file__).resolve().parents[2] / "src" / "nexus"
    readers = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ("os.environ" in line or "getenv" in line) and rel != "settings.py":
                readers.append(f"{rel}:{number}")
    allowed = {"workers.py"}
    assert [r for r in readers if r.split(":")[0] not in allowed] == []


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


def test_each_bad_variable_gets_its_own_line() -> None:
    """Several malformed variables: one error listing each variable once, on its own line."""
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"NEXUS_HTTP_PORT": "abc", "NEXUS_LEASE_S": "soon", "NEXUS_WORKERS": "0"})
    lines = str(caught.value).splitlines()
    assert lines[0] == "3 bad settings:"
    assert sorted(line.split("=")[0].strip() for line in lines[1:]) == [
        "NEXUS_HTTP_PORT",
        "NEXUS_LEASE_S",
        "NEXUS_WORKERS",
    ]


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
    """NEXUS_WORKERS (>= 1, default 1) is the divisor of every rate limit unless
    NEXUS_RATE_LIMIT_PROCESSES is set."""
    from nexus.ingress.http import rate_limits

    assert Settings.from_env({}).workers == 1
    assert rate_limits(Settings.from_env({"NEXUS_WORKERS": "4"})).processes == 4
    assert rate_limits(Settings.from_env({"NEXUS_WORKERS": "4", "NEXUS_RATE_LIMIT_PROCESSES": "6"})).processes == 6
    assert rate_limits(Settings.from_env({}, workers=2)).processes == 2
    with pytest.raises(ConfigurationError, match="NEXUS_WORKERS"):
        Settings.from_env({"NEXUS_WORKERS": "0"})
