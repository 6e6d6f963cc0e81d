"""Who the decision log names as a record's actor. Pure.

| actor                    | who                                                                   |
|--------------------------|-----------------------------------------------------------------------|
| `key:<id>`               | an API key (an agent's step over HTTP, an approver's answer)          |
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

_PREFIXES = ("system:", "kafka:", "key:")
_SYSTEM_WORDS = frozenset({"expiry", "deadline", "max_rejections", "saga"})


def key_actor(key_id: int) -> str:
    return f"key:{key_id}"


def kafka_actor(topic: str) -> str:
    return f"kafka:{topic}"


def reserved_name(name: str) -> bool:
    """Whether a key name takes an actor's form (`system:*`, `kafka:*`, `key:*`) or a system actor's word."""
    folded = name.strip().casefold()
    return folded.startswith(_PREFIXES) or folded in _SYSTEM_WORDS
