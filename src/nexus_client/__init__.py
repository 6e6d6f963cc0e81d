"""The client SDK of the Nexus Event Gateway: what an agent imports.

Typed sync and async HTTP clients of the public API (`NexusClient`, `AsyncNexusClient`), a Kafka producer
of envelopes (`nexus_client.kafka.EventProducer`, imported on demand: aiokafka, the `kafka` extra, is only
needed there), and typed errors. `EventEnvelope` is the step an agent sends (`tenant_id` is sent only when
set: the gateway takes the key's tenant). Built on `nexus_wire` only (the envelope, decision values and retry
schedule it shares with the gateway): the SDK is its own distribution, `nexus-client` (docs/sdk.md).
Configuration: `ClientConfig`, read from `NEXUS_GATEWAY_URL` and `NEXUS_API_KEY` by `ClientConfig.from_env()`.
"""

from nexus_client._protocol import envelope_json
from nexus_client.config import ClientConfig
from nexus_client.errors import ApiError, ClientError, GatewayUnreachable, NotFound, Unavailable, WaitTimeout
from nexus_client.http import AsyncNexusClient, NexusClient
from nexus_client.models import (
    Approval,
    ApprovalAnswer,
    Approvals,
    Order,
    OrderSummary,
    Plan,
    PlanOrder,
    Process,
    StepResult,
    SubmitResult,
)
from nexus_client.plans import AsyncPlanRun, PlanRun
from nexus_wire.envelope import EventEnvelope

__all__ = [
    "ApiError",
    "Approval",
    "ApprovalAnswer",
    "Approvals",
    "AsyncNexusClient",
    "AsyncPlanRun",
    "ClientConfig",
    "ClientError",
    "EventEnvelope",
    "GatewayUnreachable",
    "NexusClient",
    "NotFound",
    "Order",
    "OrderSummary",
    "Plan",
    "PlanOrder",
    "PlanRun",
    "Process",
    "StepResult",
    "SubmitResult",
    "Unavailable",
    "WaitTimeout",
    "envelope_json",
]
