"""The TLS and SASL settings of a Kafka client, and their one translation to aiokafka's arguments.

Every Kafka client takes them at construction (`**client_kwargs(security)`): the gateway's consumer and
producers, its admin and reading clients (`nexus dlq`), the SDK's `EventProducer` and `DecisionsReader`. The
gateway builds them from its settings (`Settings.kafka_security()`); the SDK from the same `NEXUS_KAFKA_*`
variables (`KafkaSecurity.from_env()`). Standard library only: the settings import it without aiokafka.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Mapping
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECURITY_VARIABLES = {
    "security_protocol": "NEXUS_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "NEXUS_KAFKA_SASL_MECHANISM",
    "sasl_username": "NEXUS_KAFKA_SASL_USERNAME",
    "sasl_password": "NEXUS_KAFKA_SASL_PASSWORD",
    "ssl_cafile": "NEXUS_KAFKA_SSL_CAFILE",
    "ssl_certfile": "NEXUS_KAFKA_SSL_CERTFILE",
    "ssl_keyfile": "NEXUS_KAFKA_SSL_KEYFILE",
}
"""The variables of `KafkaSecurity`, the same for the gateway (its settings) and the SDK (its environment)."""


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How a Kafka client reaches its broker: TLS and SASL, or neither (PLAINTEXT, the default).

    The one translation to aiokafka's arguments (`client_kwargs`), taken by every client: the gateway's
    consumer and producers, its admin and reading clients, the SDK's producer and decisions reader.
    """

    security_protocol: str = "PLAINTEXT"
    """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    sasl_mechanism: str | None = None
    """PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with SASL_*; default PLAIN)."""
    sasl_username: str | None = None
    sasl_password: str | None = dataclasses.field(default=None, repr=False)
    ssl_cafile: str | None = None
    """The CA bundle (PEM) that signed the broker's certificate; None: the system's CAs."""
    ssl_certfile: str | None = None
    """A client certificate (PEM) for brokers that ask for one, with its key in `ssl_keyfile`."""
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What is inconsistent in these settings, or None."""
        name = SECURITY_VARIABLES
        if self.security_protocol not in PROTOCOLS:
            return f"{name['security_protocol']} must be one of {', '.join(PROTOCOLS)}"
        sasl = self.security_protocol.startswith("SASL_")
        if self.sasl_mechanism is not None and self.sasl_mechanism not in MECHANISMS:
            return f"{name['sasl_mechanism']} must be one of {', '.join(MECHANISMS)}"
        if sasl and not (self.sasl_username and self.sasl_password):
            return f"{self.security_protocol} needs {name['sasl_username']} and {name['sasl_password']}"
        if not sasl and (self.sasl_mechanism or self.sasl_username or self.sasl_password):
            return f"the SASL settings need {name['security_protocol']}=SASL_SSL (or SASL_PLAINTEXT)"
        if not self.security_protocol.endswith("SSL") and (self.ssl_cafile or self.ssl_certfile or self.ssl_keyfile):
            return f"the SSL files need {name['security_protocol']}=SSL or SASL_SSL"
        if self.ssl_keyfile and not self.ssl_certfile:
            return f"{name['ssl_keyfile']} needs {name['ssl_certfile']}"
        return None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """The settings from the `NEXUS_KAFKA_*` variables (an empty one is unset); ValueError if inconsistent."""
        source = os.environ if env is None else env
        values = {field: source.get(var) or None for field, var in SECURITY_VARIABLES.items()}
        protocol = values.pop("security_protocol") or "PLAINTEXT"
        return cls(protocol.upper(), **values)

    def client_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of an aiokafka client (producer, consumer, admin) for these settings."""
        if self.security_protocol == "PLAINTEXT":
            return {}
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.endswith("SSL"):
            context = ssl.create_default_context(cafile=self.ssl_cafile)
            if self.ssl_certfile:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            kwargs["ssl_context"] = context
        if self.security_protocol.startswith("SASL_"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism or "PLAIN"
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs


def client_kwargs(security: KafkaSecurity | None) -> dict[str, Any]:
    """`security`'s aiokafka arguments; None: the SDK's way, from the `NEXUS_KAFKA_*` environment."""
    return (security if security is not None else KafkaSecurity.from_env()).client_kwargs()
