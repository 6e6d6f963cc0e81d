"""The planner's model client: the official `openai` client against any Chat Completions server, with the
run's budgets and the one retry mechanism (`nexus_wire.backoff`).

    LlmError                 the model cannot be asked any more for this plan (the plan gives up)
     +-- BudgetExhausted     the run's request or token budget is spent
     +-- ModelUnavailable    retries exhausted (429, 5xx, timeouts) or an error no retry can fix (4xx)
    RunStopped               no plan of the run can go on: stop the run at once, exit non-zero
     +-- ModelRefused        401, 403 or 404 from the model (a wrong key, base URL or model name)
     +-- ModelUnreachable    nothing answered at the base URL after every retry

The openai client's own retries are off (`max_retries=0`): 429 (honouring Retry-After up to the policy's
cap), 5xx, timeouts and connection errors are retried here, each attempt counted against the request
budget. In `auto` tool mode, a 400 to a request carrying tools switches the run to JSON mode (servers
without tool calling) and raises `SwitchedToJsonMode` so the caller asks again with a JSON-mode prompt.
Streaming (`stream=True`) accumulates the SSE chunks into the same message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from nexus_lab.llm.settings import LlmSettings
from nexus_lab.llm.tools import redact
from nexus_wire.backoff import decide, parse_retry_after


class LlmError(Exception):
    """The model cannot be asked any more for this run."""


class BudgetExhausted(LlmError):
    """The run's request or token budget is spent."""


class ModelUnavailable(LlmError):
    """The model did not answer usefully after every retry, or refused the request for good."""


class RunStopped(Exception):
    """No plan of the run can go on (every plan would fail the same way): the run stops at once and says
    why in one line. Not an `LlmError`, so no plan turns it into a give-up."""


class ModelRefused(RunStopped):
    """The model answered 401, 403 or 404: a wrong key, base URL or model name; no retry can fix it."""


class ModelUnreachable(RunStopped):
    """Nothing answered at the model's base URL (connection refused, unknown host) after every retry."""


FATAL_STATUSES = {
    401: "check NEXUS_LLM_API_KEY",
    403: "check NEXUS_LLM_API_KEY and the model's permissions",
    404: "check NEXUS_LLM_BASE_URL and NEXUS_LLM_MODEL",
}


class SwitchedToJsonMode(Exception):
    """The server refused tools (400): the run is now in JSON mode; ask again with a JSON-mode prompt."""


@dataclasses.dataclass
class Budget:
    """What the run has spent, shared by its plans (one event loop: no lock needed)."""

    max_requests: int
    max_tokens: int
    requests: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    rate_limited: int = 0
    server_errors: int = 0
    timeouts: int = 0

    def take_request(self) -> None:
        if self.requests >= self.max_requests:
            raise BudgetExhausted(f"request budget of {self.max_requests} spent")
        if self.tokens >= self.max_tokens:
            raise BudgetExhausted(f"token budget of {self.max_tokens} spent ({self.tokens} used)")
        self.requests += 1

    def as_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One completed model call: the assistant message (as a plain dict), its usage and attempts."""

    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    json_mode: bool

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LlmClient:
    """Asks the model for the next step of a conversation."""

    def __init__(self, settings: LlmSettings, budget: Budget | None = None) -> None:
        self.settings = settings
        self.budget = budget or Budget(settings.max_requests_per_run, settings.max_tokens_per_run)
        self.json_mode = settings.tool_mode == "json"
        self._secrets = settings.secrets()
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            # The client insists on a key; local servers (vLLM, Ollama, the fake) need none.
            api_key=settings.api_key or "unused",
            default_headers=dict(settings.extra_headers),
            max_retries=0,
            timeout=settings.timeout_s,
        )

    async def ask(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> Answer:
        """The model's answer to `messages` with `tools` offered (or JSON mode); retried per the policy."""
        attempt = 1
        while True:
            self.budget.take_request()
            sent_tools = bool(tools) and not self.json_mode
            try:
                answer = await self._once(messages, tools, attempt)
            except openai.BadRequestError as exc:
                if sent_tools and self.settings.tool_mode == "auto":
                    # A server without tool calling: JSON mode for the rest of the run (the caller rebuilds
                    # its prompt, which then lists the steps and their schemas).
                    self.json_mode = True
                    raise SwitchedToJsonMode(str(exc)) from exc
                raise ModelUnavailable(f"the model refused the request: {exc}") from exc
            except (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError) as exc:
                delay = self._retry_delay_s(exc, attempt)
                if delay is None and type(exc) is openai.APIConnectionError:
                    raise ModelUnreachable(
                        f"cannot reach the model at {self.settings.base_url} after {attempt} attempts: {exc} "
                        "(check NEXUS_LLM_BASE_URL)"
                    ) from exc
                if delay is None:
                    raise ModelUnavailable(f"no answer after {attempt} attempts: {type(exc).__name__}: {exc}") from exc
                self.budget.retries += 1
                await asyncio.sleep(delay)
                attempt += 1
                continue
            except openai.APIStatusError as exc:
                hint = FATAL_STATUSES.get(exc.status_code)
                if hint is not None:
                    raise ModelRefused(
                        f"the model at {self.settings.base_url} answered HTTP {exc.status_code} "
                        f"({_error_message(exc)}; {hint})"
                    ) from exc
                if exc.status_code >= 500:
                    delay = self._retry_delay_s(exc, attempt)
                    if delay is not None:
                        self.budget.retries += 1
                        await asyncio.sleep(delay)
                        attempt += 1
                        continue
                raise ModelUnavailable(f"the model answered HTTP {exc.status_code}: {exc}") from exc
            self.budget.tokens += answer.tokens
            self.budget.prompt_tokens += answer.prompt_tokens
            self.budget.completion_tokens += answer.completion_tokens
            return answer

    def _retry_delay_s(self, exc: Exception, attempt: int) -> float | None:
        retry_after_ms: float | None = None
        if isinstance(exc, openai.RateLimitError):
            self.budget.rate_limited += 1
            retry_after_ms = parse_retry_after(exc.response.headers.get("retry-after"), dt.datetime.now(dt.UTC))
        elif isinstance(exc, openai.APITimeoutError):
            self.budget.timeouts += 1
        elif isinstance(exc, openai.APIStatusError):
            self.budget.server_errors += 1
        decision = decide(self.settings.retry, attempt, random.random(), retry_after_ms)
        return decision.delay_ms / 1000.0 if decision.retry else None

    def _request(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        # The model sees only what the planner wrote; the redaction pass is a last guard against a secret
        # (the LLM key, header values) ever reaching it through data.
        safe = json.loads(redact(json.dumps(list(messages)), self._secrets))
        request: dict[str, Any] = {
            "model": self.settings.model,
            "messages": safe,
            "temperature": self.settings.temperature,
        }
        if self.json_mode:
            request["response_format"] = {"type": "json_object"}
        elif tools:
            request["tools"] = list(tools)
            request["tool_choice"] = "required"
        return request

    async def _once(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], attempt: int
    ) -> Answer:
        request = self._request(messages, tools)
        if self.settings.stream:
            return await self._streamed(request, attempt)
        # The client's `post` sends the body as built: `chat.completions.create` would first walk every
        # message and tool schema through its typed-params transform, ~30 ms of CPU per request here
        # (benchmarks/RESULTS.md), for a body that is plain JSON already. Same client, auth, headers, errors.
        completion = await self._client.post("/chat/completions", body=request, cast_to=ChatCompletion)
        if not completion.choices:
            raise ModelUnavailable("the model answered no choices")
        message = completion.choices[0].message
        usage = completion.usage
        return Answer(
            message=_message_dict(
                message.content,
                [
                    {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                    for c in message.tool_calls or []
                    if c.type == "function"
                ],
            ),
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            attempts=attempt,
            json_mode=self.json_mode,
        )

    async def _streamed(self, request: dict[str, Any], attempt: int) -> Answer:
        body = {**request, "stream": True, "stream_options": {"include_usage": True}}
        stream = await self._client.post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletionChunk,
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        prompt_tokens = completion_tokens = 0
        async for chunk in stream:
            if chunk.usage is not None:
                prompt_tokens, completion_tokens = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                for call in delta.tool_calls or []:
                    into = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                    into["id"] = call.id or into["id"]
                    if call.function is not None:
                        into["name"] += call.function.name or ""
                        into["arguments"] += call.function.arguments or ""
        return Answer(
            message=_message_dict("".join(content) or None, [calls[i] for i in sorted(calls)]),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            attempts=attempt,
            json_mode=self.json_mode,
        )

    async def aclose(self) -> None:
        await self._client.close()


def _error_message(exc: openai.APIStatusError) -> str:
    """The server's own words about a refusal: its JSON error message, else the reason phrase."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:200]
        if isinstance(inner, str):
            return inner[:200]
    return exc.response.reason_phrase or type(exc).__name__


def _message_dict(content: str | None, calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The assistant message as it goes back into the conversation."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"] or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in enumerate(calls)
        ]
    return message
