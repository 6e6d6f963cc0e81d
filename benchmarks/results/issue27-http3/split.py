"""Shares of a py-spy raw profile of the gateway by part (RESULTS.md, third pass): split.py <before> <after>."""

import collections
import sys
from pathlib import Path

# (frames that must all be on the stack, part) - the first match wins; order is specific to general.
PARTS = [
    (("Gateway.submit", "plan_batch"), "submit: plan_batch (the fold, rows, answers, log entries)"),
    (("Gateway.submit", "Connection."), "submit: asyncpg statements (execute/fetch, incl. socket writes)"),
    (("Gateway.submit", "read_batch"), "submit: read rows to state (read_batch, Python side)"),
    (("Gateway.submit",), "submit: other (transaction, record_rows/place, answers, metrics)"),
    (("EventsFastPath.__call__", "parse_body"), "request: parse and validate the body"),
    (("EventsFastPath.__call__", "RequestResponseCycle.send"), "request: response write (send, socket write)"),
    (("EventsFastPath.__call__", "Gatekeeper.admit"), "request: auth and rate limit (admit)"),
    (("EventsFastPath.__call__",), "request: other (answer, render, group commit hand-off)"),
    (("HttpToolsProtocol.data_received",), "uvicorn: HTTP parsing (data_received, headers, task creation)"),
    (("GuardedHttpToolsProtocol.data_received",), "uvicorn: HTTP parsing (data_received, headers, task creation)"),
]
CHECKS = "  of which checks (validate_step: CEL context, rules, money, list limit)"


def on_stack(frames: list[str], name: str) -> bool:
    """A frame of that exact name, or any frame of a class when the name ends with a dot."""
    return any(f == name or (name.endswith(".") and f.startswith(name)) for f in frames)


def split(path: str) -> tuple[collections.Counter[str], int]:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, number = line.rstrip().rpartition(" ")
        n = int(number)
        total += n
        frames = [x.split(" (")[0] for x in stack.split(";")]
        part = next((p for names, p in PARTS if all(on_stack(frames, x) for x in names)), "event loop and the rest")
        counts[part] += n
        if "OrderFold._judge" in frames and part == PARTS[0][1]:
            counts[CHECKS] += n
    return counts, total


a, ta = split(sys.argv[1])
b, tb = split(sys.argv[2])
for k in sorted(set(a) | set(b)):
    print(f"| {k} | {100 * a[k] / ta:.1f} % | {100 * b[k] / tb:.1f} % |")
print(ta, tb)
