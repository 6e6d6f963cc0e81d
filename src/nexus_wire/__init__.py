"""What the gateway (`nexus`) and the SDK (`nexus_client`) share on the wire: the envelope, the decision values,
the retry schedule, and the Kafka producer (`nexus_wire.kafka`, with the `kafka` extra).

Pure and small: pydantic only (aiokafka in `nexus_wire.kafka` alone); no CEL, JSON Schema or YAML, and nothing
of the gateway. The gateway checks more than this package does (the data of each step against its process).
"""

from nexus_wire.backoff import RetryPolicy
from nexus_wire.codes import ABORT_STEP, REPLAN_STEP, AbortCode, Decision
from nexus_wire.envelope import EventEnvelope

__all__ = ["ABORT_STEP", "REPLAN_STEP", "AbortCode", "Decision", "EventEnvelope", "RetryPolicy"]
