"""The SDK's pure protocol: how answers become results or typed errors, when to resend, what a change is, and
the operations both clients drive (their calls, pauses and results on canned replies)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nexus_client import ApiError, GatewayUnreachable, NotFound, Order, Unavailable
from nexus_client import _operations as ops
from nexus_client import _protocol as proto
from nexus_wire.backoff import Jitter, RetryPolicy
from nexus_wire.codes import Decision
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


def _drive(operation: ops.Operation[Any], replies: list[ops.Reply]) -> tuple[list[ops.Call | ops.Pause], Any]:
    """Run an operation on canned replies, as a client would with its I/O: what it asked for, and its result."""
    asked: list[ops.Call | ops.Pause] = []
    step = ops.advance(operation, None)
    while not isinstance(step, ops.Done):
        asked.append(step)
        step = ops.advance(operation, None if isinstance(step, ops.Pause) else replies.pop(0))
    return asked, step.value


def test_a_submit_is_resent_after_a_503_and_no_answer_then_decided() -> None:
    """The submit operation makes the call again after a 503 and after no answer, pausing on the policy's
    schedule, and counts the attempts in its result."""
    result = {"event_id": None, "decision": "APPLY", "code": None, "order": None}
    replies: list[ops.Reply] = [
        (503, _body(code="DATABASE_UNAVAILABLE", message="down")),
        GatewayUnreachable("refused"),
        (200, _body(results=[result])),
    ]
    asked, answer = _drive(ops.submit(b"{}", None, POLICY, rand=lambda: 0.5), replies)
    assert [type(a).__name__ for a in asked] == ["Call", "Pause", "Call", "Pause", "Call"]
    assert [a.seconds for a in asked if isinstance(a, ops.Pause)] == [pytest.approx(0.1), pytest.approx(0.2)]
    assert (answer.attempts, answer.first.decision) == (3, Decision.APPLY)


def test_a_submit_gives_up_when_the_policy_runs_out_and_never_resends_a_4xx() -> None:
    """After the policy's last attempt the 503 is raised; a 409 is raised at once, without a second call."""
    down: ops.Reply = (503, _body(code="DATABASE_UNAVAILABLE", message="down"))
    with pytest.raises(Unavailable):
        _drive(ops.submit(b"{}", None, POLICY, rand=lambda: 0.5), [down, down, down])
    replies: list[ops.Reply] = [(409, _body(code="PLAN_MISMATCH", message="other plan"))]
    with pytest.raises(ApiError) as err:
        _drive(ops.submit(b"{}", None, POLICY, rand=lambda: 0.5), replies)
    assert err.value.code == "PLAN_MISMATCH" and replies == []


def test_a_plan_request_returns_any_answer_but_a_503_as_it_is() -> None:
    """The plan helper's POST is resent after a 503 and returns the next answer, even a 4xx, untouched."""
    replies: list[ops.Reply] = [(503, b""), (422, _body(decision="REJECTED"))]
    asked, answer = _drive(ops.post("/v1/plans", {"process": "order"}, POLICY, rand=lambda: 0.5), replies)
    assert asked[0] == ops.Call("POST", "/v1/plans", json={"process": "order"})
    assert answer == (422, _body(decision="REJECTED"))


def test_a_read_raises_no_answer_at_once() -> None:
    """A plain GET is made once: no answer is raised, not retried."""
    with pytest.raises(GatewayUnreachable):
        _drive(ops.read(Order, "/v1/orders/o"), [GatewayUnreachable("refused")])


def test_a_load_balancers_502_and_504_are_resent_like_a_503() -> None:
    """Behind a load balancer an instance dying mid-request answers 502 (or 504 on a timeout): the submit and
    the plan helper's POST resend it on the policy, as after a 503 (a decided step comes back DUPLICATE)."""
    result = {"event_id": None, "decision": "DUPLICATE", "code": None, "order": None}
    lost: list[ops.Reply] = [(502, b"<html>502 Bad Gateway</html>"), (504, b""), (200, _body(results=[result]))]
    asked, answer = _drive(ops.submit(b"{}", None, POLICY, rand=lambda: 0.5), lost)
    assert [type(a).__name__ for a in asked] == ["Call", "Pause", "Call", "Pause", "Call"]
    assert (answer.attempts, answer.first.decision) == (3, Decision.DUPLICATE)
    replies: list[ops.Reply] = [(502, b""), (201, _body(order_id="o"))]
    _, status_body = _drive(ops.post("/v1/plans", {"process": "order"}, POLICY, rand=lambda: 0.5), replies)
    assert status_body[0] == 201
