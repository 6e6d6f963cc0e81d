"""Who the decision log names as a record's actor. Pure.

| actor                    | who                                                                   |
|--------------------------|-----------------------------------------------------------------------|
| `key:<id>`               | an API key (an agent's step over HTTP, an approver's answer)          |
| `oauth:<sub>@<host>`     | an OAuth access token: its subject at its issuer's host               |
| `kafka:<topic>`          | a step consumed from that Kafka topic                                  |
| `system:expiry`          | the sweepers of expired buffered steps and unanswered approvals       |
| `system:deadline`        | the deadline sweeper's timeout abort                                  |
| `system:max_rejections`  | the abort the gateway writes when a plan reaches `max_rejections`     |
| `system:saga`            | a saga's outcome (an effect confirmed or compensated)                 |

The key's name is stored beside its actor (`actor_name`), outside the record's hash: it is a label, and a
key cannot take a name that reads as an actor (`reserved_name`).
"""

from __future__ import annotations

SYSTEM_EXPIRY = "system:expiry"
SYSTEM_DEADLINE = "system:deadline"
SYSTEM_MAX_REJECTIONS = "system:max_rejections"
SYSTEM_SAGA = "system:saga"

_PREFIXES = ("system:", "kafka:", "key:", "oauth:")
_SYSTEM_WORDS = frozenset({"expiry", "deadline", "max_rejections", "saga"})


def key_actor(key_id: int) -> str:
    return f"key:{key_id}"


def oauth_actor(subject: str, issuer: str) -> str:
    """`oauth:<sub>@<issuer host>`: who an access token stands for (its issuer named by host, port included)."""
    host = issuer.partition("://")[2].partition("/")[0] or issuer
    return f"oauth:{subject}@{host}"


def kafka_actor(topic: str) -> str:
    return f"kafka:{topic}"


def reserved_name(name: str) -> bool:
    """Whether a key name takes an actor's form (`system:*`, `kafka:*`, `key:*`, `oauth:*`) or a system actor's word."""
    folded = name.strip().casefold()
    return folded.startswith(_PREFIXES) or folded in _SYSTEM_WORDS
