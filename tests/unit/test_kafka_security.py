"""The TLS and SASL settings of every Kafka client: one translation to aiokafka's arguments, and their checks."""

from __future__ import annotations

import ssl

import pytest

from nexus.errors import ConfigurationError
from nexus.settings import Settings, env_name
from nexus_wire.kafka_security import SECURITY_VARIABLES, KafkaSecurity


def test_plaintext_adds_no_arguments_and_is_the_default() -> None:
    """Unset, every client is built as before: no security arguments at all."""
    assert KafkaSecurity.from_env({}).client_kwargs() == {}
    assert Settings().kafka_security().client_kwargs() == {}


def test_sasl_ssl_gives_the_mechanism_the_credentials_and_a_verifying_tls_context() -> None:
    """SASL_SSL: the mechanism (PLAIN by default), the user and password, and a TLS context that checks the
    broker's certificate and name."""
    env = {
        "NEXUS_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "NEXUS_KAFKA_SASL_USERNAME": "u",
        "NEXUS_KAFKA_SASL_PASSWORD": "p",
    }
    kwargs = KafkaSecurity.from_env(env).client_kwargs()
    context = kwargs.pop("ssl_context")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert kwargs == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }
    scram = KafkaSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "u", "p").client_kwargs()
    assert scram["sasl_mechanism"] == "SCRAM-SHA-512" and "ssl_context" not in scram


def test_the_gateway_and_the_sdk_read_the_same_variables() -> None:
    """Each variable the SDK reads sets the gateway's setting of the same name (given together, as they are
    valid), and the password never shows in a repr."""
    env = {
        "NEXUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "NEXUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "NEXUS_KAFKA_SASL_USERNAME": "user",
        "NEXUS_KAFKA_SASL_PASSWORD": "p4ss",
        "NEXUS_KAFKA_SSL_CAFILE": "/ca.pem",
        "NEXUS_KAFKA_SSL_CERTFILE": "/client.pem",
        "NEXUS_KAFKA_SSL_KEYFILE": "/client.key",
    }
    assert set(env) == set(SECURITY_VARIABLES.values())
    settings = Settings.from_env(env)
    for field, var in SECURITY_VARIABLES.items():
        assert env_name(f"kafka_{field}") == var and getattr(settings, f"kafka_{field}") == env[var]
    assert settings.kafka_security() == KafkaSecurity.from_env(env)
    assert "p4ss" not in repr(KafkaSecurity.from_env(env))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NEXUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "SASL_SSL needs NEXUS_KAFKA_SASL_USERNAME"),
        ({"NEXUS_KAFKA_SASL_USERNAME": "u"}, "the SASL settings need NEXUS_KAFKA_SECURITY_PROTOCOL"),
        ({"NEXUS_KAFKA_SSL_CAFILE": "ca.pem"}, "the SSL files need NEXUS_KAFKA_SECURITY_PROTOCOL"),
        ({"NEXUS_KAFKA_SECURITY_PROTOCOL": "TLS"}, "NEXUS_KAFKA_SECURITY_PROTOCOL='TLS'"),
        ({"NEXUS_KAFKA_SECURITY_PROTOCOL": "SSL", "NEXUS_KAFKA_SSL_KEYFILE": "k"}, "NEXUS_KAFKA_SSL_KEYFILE needs"),
    ],
)
def test_inconsistent_settings_are_one_line_naming_the_variables(env: dict[str, str], message: str) -> None:
    """A SASL protocol without credentials, credentials or files without the protocol that uses them, or an
    unknown protocol: refused at start with one line naming the variables."""
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env(env)
    assert message in str(refused.value) and "\n" not in str(refused.value)
