"""The SDK's pure protocol: how answers become results or typed errors, when to resend, what a change is."""

from __future__ import annotations

import json

import pytest

from nexus.core.backoff import Jitter, RetryPolicy
from nexus.core.sequencing import Decision
from nexus_client import ApiError, GatewayUnreachable, NotFound, Order, Unavailable
from nexus_client import _protocol as proto
from tests.factories import step

POLICY = RetryPolicy(base_ms=100, max_ms=1_000, max_attempts=3, jitter=Jitter.NONE)


def _body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_one_step_is_sent_as_itself_and_several_as_events() -> None:
    """A single envelope is the body; a batch is {"events": [...]} in the given order."""
    one, two = step("o", "p", 1), step("o", "p", 2)
    assert json.loads(proto.encode_steps(one))["event_id"] == str(one.event_id)
    batch = json.loads(proto.encode_steps([one, two]))
    assert [e["seq_id"] for e in batch["events"]] == [1, 2]


def test_a_4xx_with_results_is_a_decision_not_an_error() -> None:
    """422 with results (a dead letter) is returned as a SubmitResult; 422 without results raises ApiError."""
    result = {"event_id": None, "decision": "DEAD_LETTER", "code": "INVALID_EVENT", "order": None}
    answer = proto.submit_result(422, _body(code="INVALID_EVENT", message="bad", results=[result]), attempt=2)
    assert (answer.http_status, answer.attempts, answer.first.decision) == (422, 2, Decision.DEAD_LETTER)
    with pytest.raises(ApiError) as err:
        proto.submit_result(413, _body(code="PAYLOAD_TOO_LARGE", message="too big"), attempt=1)
    assert (err.value.status, err.value.code, err.value.message) == (413, "PAYLOAD_TOO_LARGE", "too big")


def test_error_kinds_follow_the_status() -> None:
    """404 is NotFound, 503 Unavailable, a body that is not JSON still gives a code and a message."""
    assert isinstance(proto.api_error(404, _body(code="NOT_FOUND", message="no")), NotFound)
    assert isinstance(proto.api_error(503, _body(code="DATABASE_UNAVAILABLE", message="down")), Unavailable)
    plain = proto.api_error(502, b"bad gateway")
    assert (plain.code, plain.message) == ("HTTP_502", "bad gateway")


def test_only_unavailable_and_unreachable_are_resent_on_the_policy() -> None:
    """503 and no answer are resent after the policy's delays until its attempts run out; a 4xx never."""
    down = Unavailable(503, "DATABASE_UNAVAILABLE", "down")
    assert proto.retry_delay_s(POLICY, 1, down, 0.5) == pytest.approx(0.1)
    assert proto.retry_delay_s(POLICY, 2, GatewayUnreachable("refused"), 0.5) == pytest.approx(0.2)
    assert proto.retry_delay_s(POLICY, 3, down, 0.5) is None
    assert proto.retry_delay_s(POLICY, 1, ApiError(409, "PLAN_MISMATCH", "other plan"), 0.5) is None


def _order(last_seq: int, status: str | None) -> Order:
    return Order(order_id="o", plan_id="p", status=status, last_seq=last_seq)


def test_a_change_is_past_the_seq_or_out_of_the_status() -> None:
    """after_seq waits for last_seq > N, after_status for another status; neither: any change from the first."""
    assert not proto.Change(after_seq=2).seen_in(_order(2, "inventory_validated"), None)
    assert proto.Change(after_seq=2).seen_in(_order(3, "payment_processed"), None)
    assert not proto.Change(after_status="created").seen_in(_order(1, "created"), None)
    assert proto.Change(after_status="created").seen_in(_order(2, "inventory_validated"), None)
    assert not proto.Change(after_seq=0).seen_in(None, None)  # no order yet: keep waiting
    first = _order(1, "created")
    assert not proto.Change().seen_in(first, None)
    assert not proto.Change().seen_in(first, first)
    assert proto.Change().seen_in(_order(2, "inventory_validated"), first)


def test_long_poll_returns_the_changed_order_sleeps_only_after_early_answers_and_times_out() -> None:
    """`wait`'s loop: the first reading is the baseline (asked at once), an unchanged answer that came back
    early means the gateway did not hold the poll, so the client sleeps on its poll policy; an answer that
    took the wait needs no sleep; a change is returned; past the timeout it is WaitTimeout."""
    from nexus_client import WaitTimeout

    poll = proto.LongPoll("o1", proto.Change(), 10.0, now=0.0, poll=POLICY)
    assert "wait=" not in poll.path()
    first = Order(order_id="o1", plan_id="p", status="created", last_seq=1)
    assert poll.answer(first, asked=0.0, now=0.01) == 0.0  # the baseline, asked at once: no sleep
    assert "wait=" in poll.path()
    assert poll.answer(first, asked=0.02, now=0.03) == pytest.approx(0.1)  # early and unchanged: sleep
    assert poll.answer(first, asked=0.2, now=9.0) == 0.0  # held the whole wait: ask again at once
    changed = Order(order_id="o1", plan_id="p", status="created", last_seq=2)
    assert poll.answer(changed, asked=9.0, now=9.1) is changed
    with pytest.raises(WaitTimeout):
        proto.LongPoll("o1", proto.Change(after_seq=5), 1.0, now=0.0, poll=POLICY).answer(first, 0.0, 1.5)
