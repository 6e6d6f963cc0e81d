"""Debian's Prometheus, configured from the shipped deploy/prometheus.yml, scrapes a running `nexus serve`
(Kafka ingress, one subscription) with its key file and finds every series the shipped alerts read."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from nexus.delivery.signing import generate_secret
from nexus.kafka_io import EventProducer
from nexus.settings import Settings
from tests.conftest import TEST_ROOT_KEY, free_port
from tests.factories import step_json
from tests.integration.kafka_helpers import kafka_settings
from tests.unit.test_alert_rules import DEPLOY, alert_rules, selectors

__all__ = ["kafka_settings"]  # the fixture, imported for pytest


def prometheus_config(tmp_path: Path, target: str) -> Path:
    """The shipped configuration with this test's target, key file and rules path, scraping every second."""
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    key_file = tmp_path / "nexus-metrics.key"
    key_file.write_text(TEST_ROOT_KEY + "\n", encoding="utf-8")
    config["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(DEPLOY / name) for name in config["rule_files"]]
    [job] = config["scrape_configs"]
    assert job["job_name"] == "nexus" and "bearer_token_file" in job
    job["bearer_token_file"] = str(key_file)
    job["static_configs"] = [{"targets": [target]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def start_prometheus(config: Path, tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    """`prometheus` as a plain process on 127.0.0.1 (never the package's service), its data in tmp_path."""
    binary = shutil.which("prometheus")
    assert binary is not None, "prometheus missing: `make test` installs Debian's prometheus package"
    with (tmp_path / "prometheus.log").open("wb") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def missing_series(base: str) -> list[str]:
    """The selectors of the shipped alerts that Prometheus has no series for yet (or a down target)."""
    wanted = {
        name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(m.items())) + "}" if m else "")
        for rule in alert_rules()
        for name, m in selectors(rule["expr"])
    }
    missing = [s for s in sorted(wanted) if not query(base, s)]
    if not missing and [r["value"][1] for r in query(base, 'up{job="nexus"}')] != ["1"]:
        missing.append('up{job="nexus"} == 1')
    return missing


@pytest.mark.kafka
async def test_prometheus_from_the_shipped_config_finds_every_alert_series(
    kafka_settings: Settings, start_gateway: Any, tmp_path: Path
) -> None:
    """Scraped with the key file the shipped config names, every series an alert reads exists (label values
    included), `up` is 1, and the shipped rules load without error."""
    hook = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: the notification stays pending
    settings = kafka_settings.replace(webhook_url=hook, webhook_secret=generate_secret())
    _, base = start_gateway("--kafka", settings_=settings)
    async with EventProducer.from_settings(settings) as producer:
        await producer.send(step_json("o-prom", "p-prom", 1))
    prom_port = free_port()
    prom = start_prometheus(prometheus_config(tmp_path, base.removeprefix("http://")), tmp_path, prom_port)
    prom_base = f"http://127.0.0.1:{prom_port}"
    try:
        deadline = time.monotonic() + 90
        missing = ["(not started)"]
        while missing and time.monotonic() < deadline:
            await asyncio.sleep(1)
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                missing = missing_series(prom_base)
            except httpx.HTTPError as exc:
                missing = [repr(exc)]
        assert missing == [], f"{missing}\n" + (tmp_path / "prometheus.log").read_text()[-1500:]
        groups = httpx.get(f"{prom_base}/api/v1/rules", timeout=5).json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert len(rules) == len(alert_rules()) and {r["health"] for r in rules} == {"ok"}
    finally:
        prom.terminate()
        prom.wait(30)
