"""The processes the lab's agent runs, read from their definitions (`nexus.core.definitions`).

A plan is a path through a definition's steps (`definitions.plans`); the main plan is the first one (each
branch taken the first declared way). What a definition cannot say is which of a step's fields an agent
gets wrong when it hallucinates a value: `LabProcess` names it per process (the step that moves money, its
amount and currency fields, and the field of the first step the amount must equal), so the hostile modes
that depend on an order's fields (wrong amount, wrong currency, after completion) act on each process's own.

| process | money step       | amount / currency  | from the first step's | approval variant |
|---------|------------------|--------------------|-----------------------|------------------|
| order   | PaymentProcessed | amount / currency  | total_amount          | order_reviewed   |
| refund  | RefundPaid       | amount / currency  | amount                | none             |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nexus.core import definitions
from nexus.core.process_model import CompiledProcess
from nexus.processes import shipped
from nexus_wire.codes import ABORT_STEP


@dataclasses.dataclass(frozen=True, slots=True)
class LabProcess:
    """A shipped process as the lab's agent and hostile modes use it."""

    name: str
    money_step: str
    """The step whose amount and currency the wrong_amount and wrong_currency modes falsify."""
    source_amount_field: str
    """The first step's field the money step's amount must equal."""
    approval_process: str | None = None
    """The variant of this process whose money step waits for a person (the approval mode), if any."""
    amount_field: str = "amount"
    currency_field: str = "currency"

    @property
    def definition(self) -> CompiledProcess:
        return shipped(self.name)

    @property
    def steps(self) -> tuple[str, ...]:
        """The main plan's steps, in order (seq_id = position + 1)."""
        return definitions.main_plan(self.definition)

    @property
    def max_rejections(self) -> int | None:
        return self.definition.definition.max_rejections

    def plans(self) -> tuple[tuple[str, ...], ...]:
        return definitions.plans(self.definition)

    def status_after(self, shape: Sequence[str]) -> str | None:
        return definitions.status_after(self.definition, shape)

    def allowed_from(self, shape: Sequence[str]) -> tuple[str, ...]:
        """The step types allowed once the steps of `shape` applied."""
        return self.definition.allowed.get(self.status_after(shape), ())

    def completes(self, shape: Sequence[str]) -> bool:
        """Whether a plan of this shape ends the order in a terminal state other than aborted."""
        if not shape or shape[-1] == ABORT_STEP:
            return False
        return self.status_after(shape) in definitions.terminal_states(self.definition)


ORDER = LabProcess("order", "PaymentProcessed", "total_amount", approval_process="order_reviewed")
REFUND = LabProcess("refund", "RefundPaid", "amount")
LAB_PROCESSES: dict[str, LabProcess] = {p.name: p for p in (ORDER, REFUND)}
