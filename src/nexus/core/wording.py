"""What an answer says for a situation every door meets: one wording per code, whichever door (the events
API, the steps API and MCP, Kafka's dead-letter topic) and whichever record (the answer, the dead letter, the
decision log) says it. Each message names the fields concerned and the caller's own identifiers, never a
value the caller did not own. Pure."""

from __future__ import annotations


def plan_mismatch(order_id: str, followed: str | None, plan_id: str) -> str:
    """PLAN_MISMATCH: a step of another plan than the one its order follows."""
    return f"order {order_id} follows plan {followed}, not {plan_id}"


def tenant_mismatch(tenant: str) -> str:
    """TENANT_MISMATCH: an envelope naming another tenant than the one its key (or Kafka topic) speaks for."""
    return f"tenant_id: the envelope names another tenant than this caller's ({tenant})"


def body_too_large(limit: int) -> str:
    """PAYLOAD_TOO_LARGE: a request body beyond `NEXUS_MAX_BODY_BYTES`."""
    return f"body exceeds {limit} bytes"


def order_exists() -> str:
    """ORDER_EXISTS: a plan's start naming an order id the tenant knows already (`decide/plan_start.py`)."""
    return "this order id exists already; start another order id"
