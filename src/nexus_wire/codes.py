"""The values the gateway answers with and an agent sends: decisions, abort codes and the built-in steps."""

from __future__ import annotations

import enum


# What the gateway decided about one submitted item (`decision` of each result). No docstrings on these two:
# a docstring would become the description of the JSON Schemas and OpenAPI documents that use them.
class Decision(enum.StrEnum):
    APPLY = "APPLY"
    BUFFER = "BUFFER"
    DUPLICATE = "DUPLICATE"
    DISCARD = "DISCARD"
    TOMBSTONE = "TOMBSTONE"
    PLAN_MISMATCH = "PLAN_MISMATCH"
    DEAD_LETTER = "DEAD_LETTER"
    REJECTED = "REJECTED"
    HELD = "HELD"


# Why a plan was aborted (`abort_code` of an ABORT_PLAN's data).
class AbortCode(enum.StrEnum):
    INVENTORY_FAILED = "inventory_failed"
    PAYMENT_REJECTED = "payment_rejected"
    TIMEOUT = "timeout"
    MANUAL = "manual"
    POLICY_VIOLATION = "policy_violation"
    PLANNER_GAVE_UP = "planner_gave_up"  # the LLM planner gave up correcting a rejected step
    EFFECT_FAILED = "effect_failed"  # a saga effect failed before the pivot; compensated


ABORT_STEP = "ABORT_PLAN"
"""The built-in abort (no seq_id; data {reason, abort_code, aborted_at_seq})."""
REPLAN_STEP = "REPLAN"
"""The built-in plan swap (no seq_id; `plan_id` = the plan replaced; data {new_plan_id, reason})."""
