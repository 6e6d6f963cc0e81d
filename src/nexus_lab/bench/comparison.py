"""The frame of a comparison script in benchmarks/ (two setups measured alternately in one run, written as a
section of RESULTS.md): its command line, a scratch directory, the machine line of the section, and writing
the section in place of the one under the same heading.

A script writes `async def main(args) -> list[str]` (the section's lines, its heading first) and ends with
`run_comparison(__doc__, SECTION, main, RESULTS, plans=1000, ...)`: every keyword is an option (`--plans`)
whose type is its default's, beside `--rounds` (2) and `--record`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any


def machine_line() -> str:
    """Today, the cores, the machine and Python: how a section's first paragraph starts."""
    return f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({platform.machine()}, {platform.python_version()})"


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary directory for the run's servers, removed with everything in it afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def record_section(results: Path, lines: list[str]) -> None:
    """Write `lines` (a `## ` heading first) into `results`, replacing the section of that heading, else
    appended at the end."""
    heading = lines[0]
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    section = "\n".join(lines).rstrip() + "\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    results.write_text(text)


def run_comparison(
    doc: str | None,
    section: str,
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, list[str]]],
    results: Path,
    **defaults: Any,
) -> None:
    """Parse the command line (the `defaults` as options, `--rounds`, `--record`), run `main`, print its
    lines and, with `--record`, write them into `results`."""
    parser = argparse.ArgumentParser(description=(doc or section).splitlines()[0])
    for name, default in defaults.items():
        kind = str if default is None else type(default)
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--record", action="store_true", help=f"write the '{section}' section of {results.name}")
    arguments = parser.parse_args()
    lines = asyncio.run(main(arguments))
    print("\n".join(lines))
    if arguments.record:
        record_section(results, lines)
        print(f"\nrecorded in {results}")
