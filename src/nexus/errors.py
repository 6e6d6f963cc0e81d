"""Typed errors of the gateway.

One base, `NexusError`, carries a stable `ErrorCode` (used in API bodies, dead-letter records and metric
labels) and says whether retrying can help::

    NexusError
     +-- InvalidEventError        permanent  INVALID_EVENT / PARSE_ERROR
     +-- PlanMismatchError        permanent  PLAN_MISMATCH
     +-- DatabaseError
     |    +-- TransientDatabaseError   transient  DATABASE_UNAVAILABLE (server down, timeout, deadlock)
     |    +-- PermanentDatabaseError   permanent  DATABASE_REJECTED (constraint, bad data)
     +-- NotFoundError            permanent  NOT_FOUND
     +-- AlreadyRedrivenError     permanent  ALREADY_REDRIVEN
     +-- ApprovalNotPendingError  permanent  APPROVAL_NOT_PENDING (HTTP 409)
     +-- ApprovalMismatchError    permanent  APPROVAL_MISMATCH (HTTP 409: the approval binds another step)
     +-- TooManyWaitsError        permanent  TOO_MANY_WAITS (HTTP 429: a key's open streams and long polls)
     +-- QuotaExceededError       permanent  QUOTA_EXCEEDED (HTTP 429: what a tenant stores, `quota` named)
     +-- KeyRevokedError          permanent  UNAUTHENTICATED (HTTP 401: key revoked or token expired in a wait)
     +-- ConfigurationError       permanent  CONFIGURATION
     |    +-- UnsafeUrlError          permanent  UNSAFE_URL (an outbound URL aimed inside)

Driver errors are translated at the adapter (`nexus.store.errors`) with ``raise ... from exc``.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    """Stable codes: part of the public contract (HTTP bodies, DLQ headers, metric labels)."""

    PARSE_ERROR = "PARSE_ERROR"
    INVALID_EVENT = "INVALID_EVENT"
    PLAN_MISMATCH = "PLAN_MISMATCH"
    BUFFER_TIMEOUT = "BUFFER_TIMEOUT"
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    DATABASE_REJECTED = "DATABASE_REJECTED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    NOT_FOUND = "NOT_FOUND"
    CONFIGURATION = "CONFIGURATION"

    BATCH_TOO_LARGE = "BATCH_TOO_LARGE"
    NESTING_TOO_DEEP = "NESTING_TOO_DEEP"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    INVALID_IDENTIFIER = "INVALID_IDENTIFIER"
    ALREADY_REDRIVEN = "ALREADY_REDRIVEN"
    INVALID_REQUEST = "INVALID_REQUEST"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    SERVER_BUSY = "SERVER_BUSY"
    # Process validation (REJECTED decisions)
    INVALID_TRANSITION = "INVALID_TRANSITION"
    AFTER_TERMINAL = "AFTER_TERMINAL"
    UNKNOWN_STEP = "UNKNOWN_STEP"
    CHECK_FAILED = "CHECK_FAILED"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    # The decision log and the blocked-actions report
    INVALID_PARAMETER = "INVALID_PARAMETER"
    # Identity, tenancy, outbound URLs, rate limits
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    TENANT_MISMATCH = "TENANT_MISMATCH"
    RATE_LIMITED = "RATE_LIMITED"
    UNSAFE_URL = "UNSAFE_URL"
    # Sagas
    PAST_PIVOT = "PAST_PIVOT"
    # Plan lifecycle
    PLAN_SUPERSEDED = "PLAN_SUPERSEDED"
    ORDER_REMOVED = "ORDER_REMOVED"
    APPROVAL_DENIED = "APPROVAL_DENIED"
    APPROVAL_NOT_PENDING = "APPROVAL_NOT_PENDING"
    APPROVAL_MISMATCH = "APPROVAL_MISMATCH"
    # tenant safety: waits per key
    TOO_MANY_WAITS = "TOO_MANY_WAITS"
    TENANT_BUSY = "TENANT_BUSY"
    # server-numbered steps
    ORDER_EXISTS = "ORDER_EXISTS"
    UNKNOWN_PROCESS = "UNKNOWN_PROCESS"
    # quotas on what a tenant stores
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"


class NexusError(Exception):
    """Something went wrong in the gateway."""

    code: ErrorCode = ErrorCode.DATABASE_REJECTED
    transient: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.__class__.__name__).strip())

    @property
    def message(self) -> str:
        return str(self)


class InvalidEventError(NexusError):
    """The event does not match the envelope or its type's data model."""

    code = ErrorCode.INVALID_EVENT

    def __init__(self, message: str | None = None, *, code: ErrorCode = ErrorCode.INVALID_EVENT) -> None:
        super().__init__(message)
        self.code = code


class PlanMismatchError(NexusError):
    """The event belongs to another plan than the one its order follows."""

    code = ErrorCode.PLAN_MISMATCH


class DatabaseError(NexusError):
    """The database failed to complete the operation."""


class TransientDatabaseError(DatabaseError):
    """The database is unreachable or asked us to retry; the same operation may succeed later."""

    code = ErrorCode.DATABASE_UNAVAILABLE
    transient = True


class PermanentDatabaseError(DatabaseError):
    """The database rejected the operation; retrying it unchanged will fail again."""

    code = ErrorCode.DATABASE_REJECTED
    constraint: str | None = None
    """The unique or check constraint the operation violated, when the server named one."""


# One class per code below, its docstring its default message (the tree above).
class NotFoundError(NexusError):
    """The requested resource does not exist."""

    code = ErrorCode.NOT_FOUND


class AlreadyRedrivenError(NexusError):
    """The dead letter was redriven before; a dead letter is redriven at most once."""

    code = ErrorCode.ALREADY_REDRIVEN


class ApprovalNotPendingError(NexusError):
    """The approval was already answered (approved, denied, expired or cancelled)."""

    code = ErrorCode.APPROVAL_NOT_PENDING


class ApprovalMismatchError(NexusError):
    """The approval binds another step than the answer expected (event_id, data_sha256, process_version or
    seq_id differ): nothing was decided."""

    code = ErrorCode.APPROVAL_MISMATCH


class TooManyWaitsError(NexusError):
    """The key already holds as many open streams and long polls as it may (NEXUS_MAX_WAITS_PER_KEY)."""

    code = ErrorCode.TOO_MANY_WAITS


class QuotaExceededError(NexusError):
    """The request would take its tenant beyond a quota on what it stores; nothing was written."""

    code = ErrorCode.QUOTA_EXCEEDED

    def __init__(self, quota: str, message: str | None = None) -> None:
        super().__init__(message)
        self.quota = quota
        """The quota's name (live_orders, unstarted_plans, buffered_steps, dead_letters, active_keys)."""


class KeyRevokedError(NexusError):
    """The credential of this request stopped being valid while the request waited: its key was revoked, or
    its access token expired (HTTP 401)."""

    code = ErrorCode.UNAUTHENTICATED


class ConfigurationError(NexusError):
    """A setting is missing or malformed."""

    code = ErrorCode.CONFIGURATION


class UnsafeUrlError(ConfigurationError):
    """The URL is not an allowed outbound target (malformed, credentials, or a private address)."""

    code = ErrorCode.UNSAFE_URL
