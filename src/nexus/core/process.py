"""Process definitions: states, steps, transitions and value checks, loaded from YAML into frozen models.

The names importers know, from the modules that hold them: the models, compiled definitions and the
catalog (`core/process_model.py`), compiling YAML text (`core/process_compile.py`), and judging a step
against its process (`core/process_checks.py`; their place in the decision table: `core/decide/validation.py`).
Pure: YAML arrives as text; reading files happens outside the core.
"""

from __future__ import annotations

from nexus.core.process_checks import approval_expires_s, needs_approval, validate_step
from nexus.core.process_compile import compile_definition, definition_schema
from nexus.core.process_model import (
    ABORT_STEP,
    ABORTED,
    BUILTIN_STEPS,
    REPLAN_STEP,
    AbortCode,
    Approval,
    Check,
    Compensation,
    CompiledProcess,
    CompiledStep,
    Deadline,
    DefinitionError,
    Effect,
    ProcessCatalog,
    ProcessDefinition,
    Step,
    Verdict,
    content_hash,
)

__all__ = [
    "ABORTED",
    "ABORT_STEP",
    "BUILTIN_STEPS",
    "REPLAN_STEP",
    "AbortCode",
    "Approval",
    "Check",
    "Compensation",
    "CompiledProcess",
    "CompiledStep",
    "Deadline",
    "DefinitionError",
    "Effect",
    "ProcessCatalog",
    "ProcessDefinition",
    "Step",
    "Verdict",
    "approval_expires_s",
    "compile_definition",
    "content_hash",
    "definition_schema",
    "needs_approval",
    "validate_step",
]
