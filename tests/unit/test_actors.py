"""The decision log's actors, pure: which key names read as an actor, and the forms of a key's and a
topic's actor."""

from __future__ import annotations

import pytest

from nexus.core.actors import kafka_actor, key_actor, reserved_name


@pytest.mark.parametrize(
    "name",
    ["expiry", "deadline", "max_rejections", "saga", "EXPIRY", " saga ", "system:", "system:expiry", "SYSTEM:x",
     "kafka:orders", "Kafka:x", "key:1", "key:"],
)  # fmt: skip
def test_names_of_an_actors_form_are_reserved(name: str) -> None:
    """A name starting with an actor's prefix (any case) or equal to a system actor's word is reserved."""
    assert reserved_name(name)


@pytest.mark.parametrize("name", ["expiry-bot", "my saga", "deadlines", "keys:1", "planner", "system", "kafka"])
def test_plain_names_are_free(name: str) -> None:
    """Names that merely contain a system word, or lack the colon, stay free."""
    assert not reserved_name(name)


def test_actor_forms() -> None:
    """A key is named by its id, a Kafka step by its topic."""
    assert (key_actor(7), kafka_actor("nexus.events")) == ("key:7", "kafka:nexus.events")
