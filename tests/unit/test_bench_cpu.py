"""The wrk bench's CPU accounting (`nexus_lab.bench.wrk.tree_cpu_s`) counts a gateway's child processes."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from nexus_lab.bench.wrk import _stat, tree_cpu_s

BURN = (
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
    "print('burnt', flush=True)\ntime.sleep(60)"
)
ROOT = (
    "import subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', {BURN!r}], stdout=subprocess.PIPE)\n"
    "child.stdout.readline()\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)"
)


@pytest.mark.processes
def test_a_busy_child_of_an_idle_root_is_counted() -> None:
    """`nexus serve --workers 2` does its work in children: their CPU is the gateway's, not the idle root's."""
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE)
    try:
        assert root.stdout is not None and root.stdout.readline().strip() == b"ready"
        fields = _stat(root.pid)
        assert fields is not None
        own = (int(fields[11]) + int(fields[12])) / 100
        total = tree_cpu_s(root.pid)
        assert own < 0.4 and total >= 0.45, (own, total)
    finally:
        for child in psutil.Process(root.pid).children():
            child.kill()
        root.kill()
        root.wait()
        assert root.stdout is not None
        root.stdout.close()


def test_machine_shares_say_how_much_of_a_run_the_host_took() -> None:
    """The bench's machine-wide split of a run's CPU time: busy, idle (iowait included) and stolen."""
    from collections import namedtuple

    from nexus_lab.bench.cpu import machine_shares, machine_times

    Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
    before = Times(100, 0, 50, 1000, 10, 0, 0, 5, 3, 0)
    after = Times(160, 0, 70, 1090, 20, 0, 0, 25, 9, 0)  # 80 busy, 100 idle, 20 stolen; guest is in user
    assert machine_shares(before, after) == {"busy": 40.0, "idle": 50.0, "steal": 10.0}
    now = machine_times()
    shares = machine_shares(now, machine_times())
    assert set(shares) == {"busy", "idle", "steal"} and all(0 <= v <= 100 for v in shares.values())
