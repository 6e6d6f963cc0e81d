"""Logging: structlog's processors for every log line of the process, ours and the libraries'.

The gateway's modules log through the standard library (`logging.getLogger(__name__)`, keys passed as
``extra=``), as uvicorn, aiokafka, asyncpg and pgserver do. One handler on the root logger renders every
record through structlog's `ProcessorFormatter`: the ``extra=`` keys become keys of the line (the
stable ones, `action`, `order_id`, `plan_id`, `event_id`, `tenant_id`, `trace_id`, `decision`, let a
person follow one order through the logs), a timestamp, level and logger name are added, and the line
is rendered as one JSON object when stdout is not a terminal (a supervisor, a file, a log shipper) or as
a readable console line when it is.

`structlog.get_logger()` loggers, if a module prefers them, go through the same processors.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.types import EventDict, Processor

from nexus.errors import ConfigurationError

STABLE_KEYS = ("action", "order_id", "plan_id", "event_id", "tenant_id", "trace_id", "decision")
"""Keys whose name and meaning do not change: dashboards and people search by them."""

_NOISY = {"pgserver": logging.WARNING, "httpx": logging.WARNING}
"""Libraries that narrate routine work at INFO (pgserver: every pg_ctl call; httpx: every request's full URL,
and webhook URLs may carry tokens); their warnings are kept."""


def _drop_library_noise(_: Any, __: str, event_dict: EventDict) -> EventDict:
    # uvicorn attaches a copy of its message with terminal colour codes as an extra.
    event_dict.pop("color_message", None)
    return event_dict


def _shared() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def setup_logging(level: str, *, stream: TextIO | None = None, json: bool | None = None) -> None:
    """Route every log record of the process through structlog, at `level` (NEXUS_LOG_LEVEL).

    `json` None chooses by the terminal: JSON lines unless stdout is a terminal. Records go to `stream`
    (stderr by default), so stdout keeps only what a command prints for its user.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigurationError(f"NEXUS_LOG_LEVEL={level!r}: not a logging level (DEBUG, INFO, WARNING, ERROR)")
    if json is None:
        json = not sys.stdout.isatty()
    renderer: Processor
    if json:
        renderer = structlog.processors.JSONRenderer()
        finishing: list[Processor] = [structlog.processors.format_exc_info]
    else:
        renderer = structlog.dev.ConsoleRenderer()
        finishing = []
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_shared(), structlog.stdlib.ExtraAdder(), _drop_library_noise],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *finishing, renderer],
    )
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name, floor in _NOISY.items():
        logging.getLogger(name).setLevel(max(floor, numeric))
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
