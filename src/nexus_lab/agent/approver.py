"""The lab's approver, a person stand-in answering the agent's held steps over the client SDK.

The agent's `approval` plans place an order above the `order_reviewed` process's threshold, so their
PaymentProcessed is HELD; once a plan sent every step (its successors wait in the buffer) the plan asks the
approver to answer its held step as its seed decided (`approve` or `deny`, hostile.py). The approver needs
a key with the `approver` role (`nexus agent --approver-key`, else the agent's own key). It answers by the
approval_id the HELD answer carried, or, when the transport gave none (Kafka without decisions), by finding
the step's event_id among the pending approvals (`GET /v1/approvals`), polling until it is there.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from nexus_client import AsyncNexusClient, ClientConfig, ClientError


class ApprovalError(Exception):
    """The approver could not answer a held step (no such pending approval, refused, unreachable)."""


class LabApprover:
    """Answers held steps with one approver key."""

    def __init__(self, gateway_url: str | None = None, *, api_key: str | None = None, find_timeout_s: float = 30.0):
        self._client = AsyncNexusClient(ClientConfig.from_env(gateway_url=gateway_url, api_key=api_key))
        self.find_timeout_s = find_timeout_s

    async def _find(self, event_id: str) -> str:
        deadline = time.monotonic() + self.find_timeout_s
        while True:
            pending = await self._client.approvals(limit=1000)
            found = next((a.approval_id for a in pending if a.event_id == event_id), None)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise ApprovalError(f"no pending approval of event {event_id} within {self.find_timeout_s}s")
            await asyncio.sleep(0.2)

    async def answer(self, event_id: str, approval_id: str | None, *, approve: bool) -> dict[str, Any]:
        """Approve or deny the held step; what the report records about it."""
        try:
            approval_id = approval_id or await self._find(event_id)
            answer = await self._client.answer_approval(approval_id, approve=approve)
        except ClientError as exc:
            raise ApprovalError(f"cannot answer the approval of event {event_id}: {exc}") from exc
        return {
            "approval_id": approval_id,
            "answer": "approve" if approve else "deny",
            "status": answer.status,
            "decision": answer.result.decision.value,
            "code": answer.result.code,
        }

    async def close(self) -> None:
        await self._client.aclose()
