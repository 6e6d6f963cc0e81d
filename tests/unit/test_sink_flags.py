"""The webhook sink's command line (`nexus_lab.sink`): every fault flag reaches the `Faults` field it names."""

from __future__ import annotations

import argparse
import dataclasses

from nexus_lab.sink import Faults, configure, faults_from

FLAGS = [
    "--seed", "7", "--fail-rate", "0.5", "--fail-status", "429", "--fail-status", "500,502", "--hang-rate", "0.25",
    "--fail-first", "2", "--latency-ms", "3", "--retry-after", "1.5", "--fault-event-type", "OrderShipped",
]  # fmt: skip
EXPECTED = Faults(
    seed="7",
    fail_rate=0.5,
    fail_status=(429, 500, 502),
    hang_rate=0.25,
    fail_first=2,
    latency_ms=3.0,
    retry_after=1.5,
    event_types=frozenset({"OrderShipped"}),
)


def test_every_fault_flag_reaches_its_field() -> None:
    """Each fault flag, given a value other than its default, is the value of its field in the sink's faults."""
    parser = argparse.ArgumentParser()
    configure(parser)
    assert all(getattr(EXPECTED, f.name) != f.default for f in dataclasses.fields(Faults))  # every field is tried
    assert faults_from(parser.parse_args(FLAGS)) == EXPECTED


def test_no_fault_flag_is_no_fault() -> None:
    """Without fault flags the sink's faults are the defaults (failures answered 500 or 503 when asked for)."""
    parser = argparse.ArgumentParser()
    configure(parser)
    assert faults_from(parser.parse_args([])) == Faults(seed="0")
