"""The retry schedule, shared with the SDK: it lives in `nexus_wire.backoff` (see there); the gateway's modules
import it from here."""

from nexus_wire.backoff import Backoff as Backoff
from nexus_wire.backoff import Jitter as Jitter
from nexus_wire.backoff import RetryDecision as RetryDecision
from nexus_wire.backoff import RetryPolicy as RetryPolicy
from nexus_wire.backoff import decide as decide
from nexus_wire.backoff import exponential_ms as exponential_ms
from nexus_wire.backoff import jittered_ms as jittered_ms
from nexus_wire.backoff import parse_retry_after as parse_retry_after
