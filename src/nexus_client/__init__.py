"""The client SDK of the Nexus Event Gateway: what an agent imports.

Typed sync and async HTTP clients of the public API (`NexusClient`, `AsyncNexusClient`), a Kafka producer
of envelopes (`nexus_client.kafka.EventProducer`, imported on demand: aiokafka is only needed there), and
typed errors. Built on the gateway's pure core (`nexus.core`) only. Configuration: `ClientConfig`, read
from `NEXUS_GATEWAY_URL` and `NEXUS_API_KEY` by `ClientConfig.from_env()`.
"""

from nexus_client.config import ClientConfig
from nexus_client.errors import ApiError, ClientError, GatewayUnreachable, NotFound, Unavailable, WaitTimeout
from nexus_client.http import AsyncNexusClient, NexusClient
from nexus_client.models import (
    Approval,
    ApprovalAnswer,
    Order,
    OrderSummary,
    Plan,
    PlanOrder,
    Process,
    StepResult,
    SubmitResult,
)
from nexus_client.plans import AsyncPlanRun, PlanRun

__all__ = [
    "ApiError",
    "Approval",
    "ApprovalAnswer",
    "AsyncNexusClient",
    "AsyncPlanRun",
    "ClientConfig",
    "ClientError",
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
]
