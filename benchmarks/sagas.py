"""Sagas per second with the local services at several concurrencies, and the latency a saga adds per
effect over the bare HTTP call: now the `sagas` suite of `nexus bench` (src/nexus_lab/bench/sagas.py, with
the executors in their own process, woken by NOTIFY and by their poll in the same run).

Usage: ``.venv/bin/python benchmarks/sagas.py [--sagas 100] [--concurrency 1 --concurrency 16 ...]``, the
same as ``nexus bench --suite sagas ...``.
"""

from __future__ import annotations

import sys

from nexus_cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--suite", "sagas", *sys.argv[1:]]))
