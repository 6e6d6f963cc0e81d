"""The LLM planner's settings: one frozen object, and the one place the lab reads `NEXUS_LLM_*`.

Flags win over variables, variables over defaults:

| setting | variable | flag | default |
|---|---|---|---|
| base_url | `NEXUS_LLM_BASE_URL` | `--llm-base-url` | `https://api.openai.com/v1` |
| model | `NEXUS_LLM_MODEL` | `--llm-model` | `gpt-4o-mini` |
| api_key | `NEXUS_LLM_API_KEY` | (none: keys stay out of argv) | unset |
| extra_headers | `NEXUS_LLM_EXTRA_HEADERS` (JSON object) | `--llm-header NAME=VALUE` (repeat) | none |
| temperature | `NEXUS_LLM_TEMPERATURE` | `--llm-temperature` | 0 |
| max_tokens_per_run | `NEXUS_LLM_MAX_TOKENS` | `--llm-max-tokens` | 2,000,000 |
| max_requests_per_run | `NEXUS_LLM_MAX_REQUESTS` | `--llm-max-requests` | 10,000 |
| max_corrections | `NEXUS_LLM_MAX_CORRECTIONS` | `--max-corrections` | 3 |
| timeout_s | `NEXUS_LLM_TIMEOUT_S` | `--llm-timeout` | 60 |
| retry_base_ms, retry_max_ms | `NEXUS_LLM_RETRY_BASE_MS`, `NEXUS_LLM_RETRY_MAX_MS` | | 500, 20,000 |
| retry_attempts | `NEXUS_LLM_RETRY_ATTEMPTS` | | 8 |
| tool_mode | `NEXUS_LLM_TOOL_MODE` (`auto`, `tools`, `json`) | `--llm-tool-mode` | auto |
| stream | `NEXUS_LLM_STREAM` (1/0) | `--llm-stream` | off |
| process | `NEXUS_LLM_PROCESS` | `--process` | `order` |

OpenRouter works by base URL alone (`https://openrouter.ai/api/v1`); its optional `HTTP-Referer` and
`X-Title` go in the extra headers. The budgets are per run (all plans of one `nexus agent` together);
every HTTP attempt counts as a request, retries included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from nexus_wire.backoff import Jitter, RetryPolicy

TOOL_MODES = ("auto", "tools", "json")


@dataclasses.dataclass(frozen=True, slots=True)
class LlmSettings:
    """Where the model is, how to call it, and how much one run may spend."""

    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key: str | None = dataclasses.field(default=None, repr=False)
    extra_headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    temperature: float = 0.0
    max_tokens_per_run: int = 2_000_000
    max_requests_per_run: int = 10_000
    max_corrections: int = 3
    """A rejected step may be corrected this many times; one more rejection and the plan is given up."""
    timeout_s: float = 60.0
    retry_base_ms: float = 500.0
    retry_max_ms: float = 20_000.0
    retry_attempts: int = 8
    tool_mode: str = "auto"
    stream: bool = False
    process: str = "order"

    def __post_init__(self) -> None:
        if self.tool_mode not in TOOL_MODES:
            raise ValueError(f"tool mode is one of {', '.join(TOOL_MODES)}, not {self.tool_mode!r}")
        if self.max_corrections < 0 or self.max_tokens_per_run < 1 or self.max_requests_per_run < 1:
            raise ValueError("budgets must be positive and max_corrections not negative")

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(
            base_ms=self.retry_base_ms,
            max_ms=self.retry_max_ms,
            max_attempts=self.retry_attempts,
            jitter=Jitter.EQUAL,
        )

    def secrets(self) -> list[str]:
        """Values that must never reach the model (the LLM key, and header values such as tokens)."""
        return [v for v in (self.api_key, *self.extra_headers.values()) if v and len(v) >= 8]

    def public(self) -> dict[str, Any]:
        """The settings as a report may show them: no key, no header values."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "api_key_set": self.api_key is not None,
            "extra_headers": sorted(self.extra_headers),
            "temperature": self.temperature,
            "max_tokens_per_run": self.max_tokens_per_run,
            "max_requests_per_run": self.max_requests_per_run,
            "max_corrections": self.max_corrections,
            "timeout_s": self.timeout_s,
            "tool_mode": self.tool_mode,
            "stream": self.stream,
            "process": self.process,
        }

    def replace(self, **changes: Any) -> LlmSettings:
        return dataclasses.replace(self, **changes)


# Each setting's variable: NEXUS_LLM_ and its name in capitals, but for the budgets (named as their flags) and
# for extra_headers and stream, read apart (a JSON object, a 1/0 switch).
_RENAMED = {"max_tokens_per_run": "NEXUS_LLM_MAX_TOKENS", "max_requests_per_run": "NEXUS_LLM_MAX_REQUESTS"}
_READ_APART = ("extra_headers", "stream")
_KINDS: dict[str, type] = {"str": str, "str | None": str, "float": float, "int": int}
_ENV: dict[str, tuple[str, type]] = {
    f.name: (_RENAMED.get(f.name, f"NEXUS_LLM_{f.name.upper()}"), _KINDS[str(f.type)])
    for f in dataclasses.fields(LlmSettings)
    if f.name not in _READ_APART
}


def _headers(raw: str | None, pairs: Sequence[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    if raw:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
            raise ValueError("NEXUS_LLM_EXTRA_HEADERS is a JSON object of strings")
        headers.update(parsed)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--llm-header takes NAME=VALUE, not {pair!r}")
        headers[name.strip()] = value
    return headers


def from_env(env: Mapping[str, str], **flags: Any) -> LlmSettings:
    """The settings from `NEXUS_LLM_*` variables, with non-None keyword flags winning."""
    values: dict[str, Any] = {}
    for field, (var, kind) in _ENV.items():
        raw = env.get(var)
        if raw not in (None, ""):
            values[field] = kind(raw)
    stream = env.get("NEXUS_LLM_STREAM", "")
    if stream:
        values["stream"] = stream.lower() in ("1", "true", "yes", "on")
    values["extra_headers"] = _headers(env.get("NEXUS_LLM_EXTRA_HEADERS"), flags.pop("headers", None) or [])
    values.update({k: v for k, v in flags.items() if v is not None})
    return LlmSettings(**values)


def configure(parser: argparse.ArgumentParser) -> None:
    """The planner's flags (each defaults to its variable, then to the table above)."""
    group = parser.add_argument_group("LLM planner (--planner llm; NEXUS_LLM_* variables)")
    group.add_argument("--llm-base-url", default=None, help="Chat Completions base URL (NEXUS_LLM_BASE_URL)")
    group.add_argument("--llm-model", default=None, help="model name (NEXUS_LLM_MODEL)")
    group.add_argument("--llm-header", action="append", default=[], help="extra header NAME=VALUE (repeatable)")
    group.add_argument("--llm-temperature", type=float, default=None, help="sampling temperature (0)")
    group.add_argument("--llm-max-tokens", type=int, default=None, help="token budget of the run")
    group.add_argument("--llm-max-requests", type=int, default=None, help="request budget of the run")
    group.add_argument("--max-corrections", type=int, default=None, help="corrections of a rejected step (3)")
    group.add_argument("--llm-timeout", type=float, default=None, help="seconds per model request (60)")
    group.add_argument("--llm-tool-mode", choices=TOOL_MODES, default=None, help="tools, json, or auto (fallback)")
    group.add_argument("--llm-stream", action="store_true", default=None, help="stream the model's answers (SSE)")
    group.add_argument("--process", default=None, help="the process the plans follow (order)")


def from_args(args: argparse.Namespace, env: Mapping[str, str]) -> LlmSettings:
    return from_env(
        env,
        headers=args.llm_header,
        base_url=args.llm_base_url,
        model=args.llm_model,
        temperature=args.llm_temperature,
        max_tokens_per_run=args.llm_max_tokens,
        max_requests_per_run=args.llm_max_requests,
        max_corrections=args.max_corrections,
        timeout_s=args.llm_timeout,
        tool_mode=args.llm_tool_mode,
        stream=args.llm_stream,
        process=args.process,
    )
