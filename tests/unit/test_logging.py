"""Log lines: structlog renders every stdlib record, with the keys passed as extra=."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from nexus.errors import ConfigurationError
from nexus.logging import STABLE_KEYS, setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_extra_keys(restore_logging: None) -> None:
    """In JSON mode each record is one object holding the message, level, logger and every extra= key."""
    out = io.StringIO()
    setup_logging("INFO", stream=out, json=True)
    keys = {k: f"v-{k}" for k in STABLE_KEYS}
    logging.getLogger("nexus.test").info("step %s", "APPLY", extra=keys)
    logging.getLogger("nexus.test").debug("below the level")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["event"] == "step APPLY"
    assert line["level"] == "info"
    assert line["logger"] == "nexus.test"
    for k, v in keys.items():
        assert line[k] == v


def test_console_lines_are_readable(restore_logging: None) -> None:
    """In console mode the line is text with key=value pairs, not JSON."""
    out = io.StringIO()
    setup_logging("INFO", stream=out, json=False)
    logging.getLogger("nexus.test").warning("claim failed", extra={"action": "claim"})
    text = out.getvalue()
    assert "claim failed" in text
    assert "action" in text
    with pytest.raises(ValueError, match="Expecting value"):
        json.loads(text)


def test_exceptions_are_rendered_into_the_line(restore_logging: None) -> None:
    """An exception logged in JSON mode stays inside its one JSON line."""
    out = io.StringIO()
    setup_logging("INFO", stream=out, json=True)
    try:
        _fail()
    except RuntimeError:
        logging.getLogger("nexus.test").exception("failed", extra={"action": "x"})
    (line,) = out.getvalue().splitlines()
    assert "RuntimeError: boom" in json.loads(line)["exception"]


def test_a_bad_level_names_the_variable(restore_logging: None) -> None:
    """NEXUS_LOG_LEVEL that is not a level fails naming the variable."""
    with pytest.raises(ConfigurationError, match="NEXUS_LOG_LEVEL"):
        setup_logging("LOUD", stream=io.StringIO())


def _fail() -> None:
    raise RuntimeError("boom")


class _Stdout:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(("tty", "is_json"), [(False, True), (True, False)])
def test_format_follows_the_terminal(
    restore_logging: None, monkeypatch: pytest.MonkeyPatch, tty: bool, is_json: bool
) -> None:
    """Without an explicit choice: JSON lines when stdout is not a terminal, console lines when it is."""
    monkeypatch.setattr("sys.stdout", _Stdout(tty))
    out = io.StringIO()
    setup_logging("INFO", stream=out)
    logging.getLogger("nexus.test").info("hello", extra={"action": "a"})
    text = out.getvalue().strip()
    assert text.startswith("{") == is_json
    if is_json:
        assert json.loads(text)["action"] == "a"
