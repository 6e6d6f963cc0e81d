"""What one chaos scenario did and what held: the result both runners (`runner`, `sagas`) return."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ScenarioResult:
    """What one scenario did and what held."""

    name: str
    plans: int
    faults: dict[str, int]
    held: int
    checked: int
    elapsed_s: float
    proof: str
    failures: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    check_text: str = ""

    @property
    def invariants_ok(self) -> bool:
        return self.error is None and self.held == self.checked and not self.failures

    @property
    def injected(self) -> int:
        return sum(self.faults.values())

    @property
    def fault_proved(self) -> bool:
        return self.faults.get(self.proof, 0) > 0 or (self.proof == "faults" and self.injected > 0)

    @property
    def ok(self) -> bool:
        return self.invariants_ok

    def summary_lines(self) -> list[str]:
        """How a runner ends a scenario's output: ok or FAILED with the counts, then the first broken lines."""
        status = "ok" if self.ok else "FAILED"
        lines = [f"{status}: invariants {self.held}/{self.checked}, faults {self.faults}, {self.elapsed_s:.1f}s"]
        lines += [f"  broke: {line}" for line in self.failures[:10]]
        if self.error:
            lines.append(f"  error: {self.error}")
        return lines
