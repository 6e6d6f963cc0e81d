"""Retry schedules: how long a failed attempt waits before the next one. Pure: randomness and clock passed in.

Every retry in Nexus asks this module, so one policy, one cap and one reading of ``Retry-After`` hold
everywhere: webhook deliveries (`decide`, which gives up after `max_attempts`) and the retry-in-place
loops that must never give up because skipping would lose work (the Kafka consumer's submit, dead-letter,
commit and reconnect loops; the dispatcher's result writes): those keep a `Backoff`, the loop's position
in the same schedule, and sleep what it says (nexus/retrying.py does the sleeping).

The schedule is exponential, ``base * 2 ** (attempt - 1)``, capped at ``max_ms``, with jitter so that
many notifications failing together (a receiver restarting) do not come back together:

* ``EQUAL`` (default) waits between half and all of the exponential delay: a floor keeps a failing
  receiver from being hit again at once, the spread de-synchronises the herd.
* ``FULL`` waits anywhere between 0 and the delay (lowest total load, AWS's recommendation).
* ``NONE`` is for tests and tables.

``Retry-After`` (seconds or an HTTP-date) is honoured as a lower bound, but never beyond ``max_ms``:
the cap is our promise of the longest gap between two attempts of a notification, and a receiver
asking for a day would otherwise park its orders (whose later notifications wait behind) for a day.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import enum
import math
import re


class Jitter(enum.StrEnum):
    NONE = "none"
    FULL = "full"
    EQUAL = "equal"


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how often to retry. Attempts are counted from 1 (the first try)."""

    base_ms: float = 500.0
    """Delay after the first failed attempt, before jitter."""
    max_ms: float = 300_000.0
    """Cap of any one delay, Retry-After included."""
    max_attempts: int = 10
    """Attempts in total, the first included; the last failure is final."""
    jitter: Jitter = Jitter.EQUAL

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.max_ms < 0:
            raise ValueError("retry delays must not be negative")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    @classmethod
    def constant(cls, delay_ms: float) -> RetryPolicy:
        """Always `delay_ms`, no growth, no jitter: for loops whose pace is set elsewhere (a poll interval)."""
        return cls(base_ms=delay_ms, max_ms=delay_ms, max_attempts=1, jitter=Jitter.NONE)


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Where a retry-in-place loop stands: its policy and its failures in a row so far.

    For loops that never give up (skipping would lose records or results): the policy's schedule is
    followed, its `max_attempts` is not. A success starts the schedule over (`reset`).
    """

    policy: RetryPolicy
    failures: int = 0

    def after_failure(self, rand: float) -> tuple[float, Backoff]:
        """One more failure: the delay (ms) before the next try, and the loop's next position."""
        failures = self.failures + 1
        return jittered_ms(self.policy, failures, rand), dataclasses.replace(self, failures=failures)

    def reset(self) -> Backoff:
        return dataclasses.replace(self, failures=0)


@dataclasses.dataclass(frozen=True, slots=True)
class RetryDecision:
    """What to do after a failed attempt: retry after `delay_ms`, or give up (`retry` False)."""

    retry: bool
    delay_ms: float = 0.0


def exponential_ms(policy: RetryPolicy, attempt: int) -> float:
    """The capped exponential delay after failed attempt number `attempt` (from 1), before jitter."""
    if attempt < 1:
        raise ValueError("attempts are counted from 1")
    # 2 ** 60 already exceeds any sane cap; bounding the exponent keeps the float finite.
    return min(policy.max_ms, policy.base_ms * math.pow(2.0, min(attempt - 1, 60)))


def jittered_ms(policy: RetryPolicy, attempt: int, rand: float) -> float:
    """The delay after failed attempt `attempt`, with `rand` a uniform draw in [0, 1)."""
    if not 0.0 <= rand <= 1.0:
        raise ValueError("rand must be in [0, 1]")
    delay = exponential_ms(policy, attempt)
    if policy.jitter is Jitter.FULL:
        return delay * rand
    if policy.jitter is Jitter.EQUAL:
        return delay / 2 + (delay / 2) * rand
    return delay


def decide(policy: RetryPolicy, attempt: int, rand: float, retry_after_ms: float | None = None) -> RetryDecision:
    """After failed attempt number `attempt`: retry (when, honouring Retry-After up to the cap) or stop."""
    if attempt >= policy.max_attempts:
        return RetryDecision(retry=False)
    delay = jittered_ms(policy, attempt, rand)
    if retry_after_ms is not None:
        delay = max(delay, min(retry_after_ms, policy.max_ms))
    return RetryDecision(retry=True, delay_ms=delay)


# ASCII digits only: `str.isdigit` also accepts superscripts and other scripts' digits, which float() refuses.
_DELTA_SECONDS = re.compile(r"[0-9]+")
_LONGEST_S = 10.0**9  # beyond any cap; keeps a 400-digit value finite


def parse_retry_after(value: str | None, now: dt.datetime) -> float | None:
    """A ``Retry-After`` header as milliseconds from `now` (aware); None when absent or unreadable.

    Both forms of RFC 9110 are read: delta-seconds (``120``) and an HTTP-date; a date in the past is 0.
    The header is the receiver's, so anything else (a superscript two, which `str.isdigit` calls a digit, a date no
    calendar has, a year past 9999) is read as absent, never as an error.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _DELTA_SECONDS.fullmatch(text):
        return min(float(text), _LONGEST_S) * 1000.0
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds() * 1000.0)
