"""Every approval shows what it binds (event_id, data_sha256, process_version, seq_id) in the REST listing, the
CLI and the console, and an approve or deny whose `expect` differs is 409 APPROVAL_MISMATCH with nothing decided."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import register
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import api_headers, settings_env
from tests.factories import step_json
from tests.helpers import nexus_command
from tests.integration.test_approvals import api, approval_settings, held_order
from tests.integration.test_console import browser, sign_in

__all__ = ["api", "approval_settings", "browser"]  # fixtures, imported for pytest

pytestmark = pytest.mark.slow


def sha_of(data: dict[str, Any]) -> str:
    """The binding's hash, computed here from its definition (canonical JSON: sorted keys, no whitespace, UTF-8)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def test_the_listing_shows_what_each_approval_binds(api: httpx.AsyncClient) -> None:
    """GET /v1/approvals: the held payment's event_id, the SHA-256 of its data, the process version and its seq."""
    approval_id, payment = await held_order(api, "o-bind")
    [item] = (await api.get("/v1/approvals", headers=api_headers())).json()["approvals"]
    assert item["approval_id"] == approval_id
    bound = {k: item[k] for k in ("event_id", "data_sha256", "process_version", "seq_id")}
    assert bound == {
        "event_id": payment["event_id"], "data_sha256": sha_of(payment["data"]), "process_version": 2, "seq_id": 3,
    }  # fmt: skip


async def test_an_answer_expecting_another_step_decides_nothing(api: httpx.AsyncClient) -> None:
    """approve and deny with an `expect` that differs in any one field: 409 APPROVAL_MISMATCH naming the field,
    the approval still pending and the order unchanged; the matching `expect` then approves."""
    approval_id, payment = await held_order(api, "o-expect")
    right = {"event_id": payment["event_id"], "data_sha256": sha_of(payment["data"]), "process_version": 2, "seq_id": 3}
    wrongs = [
        {"event_id": "00000000-0000-4000-8000-000000000001"},
        {"data_sha256": sha_of({**payment["data"], "amount": 1})},
        {"process_version": 1},
        {"seq_id": 4},
    ]
    for wrong in wrongs:
        for verb in ("approve", "deny"):
            body = {"expect": {**right, **wrong}}
            refused = await api.post(f"/v1/approvals/{approval_id}/{verb}", json=body, headers=api_headers())
            assert refused.status_code == 409, refused.text
            error = refused.json()
            assert error["code"] == "APPROVAL_MISMATCH" and next(iter(wrong)) in error["message"], error
            assert {"code", "message", "request_id"} <= set(error) and error["retryable"] is False
    listed = (await api.get("/v1/approvals", headers=api_headers())).json()["approvals"]
    assert [(a["approval_id"], a["status"]) for a in listed] == [(approval_id, "pending")]
    order = (await api.get("/v1/orders/o-expect", headers=api_headers())).json()
    assert (order["last_seq"], order["buffered"]) == (2, [4, 5])
    unknown = await api.post(f"/v1/approvals/{approval_id}/approve", json={"expect": {"seq": 3}}, headers=api_headers())
    assert unknown.status_code == 422  # a misspelt field is refused, not skipped
    done = await api.post(f"/v1/approvals/{approval_id}/approve", json={"expect": right}, headers=api_headers())
    assert done.status_code == 200 and done.json()["result"]["decision"] == "APPLY", done.text


@pytest.mark.processes
async def test_the_cli_lists_the_binding_and_refuses_a_mismatch(
    api: httpx.AsyncClient, approval_settings: Settings
) -> None:
    """`nexus approvals list` prints the binding; `deny --expect-seq-id 9` exits 1 with APPROVAL_MISMATCH and
    decides nothing; `deny --expect-data-sha256 <the right one>` denies."""
    approval_id, payment = await held_order(api, "o-cli-bind")
    env = settings_env(approval_settings)
    listing = nexus_command("approvals", "list", env=env)
    assert f"data_sha256 {sha_of(payment['data'])}" in listing and f"event_id {payment['event_id']}" in listing
    assert "process_version 2  seq_id 3" in listing
    refused = subprocess.run(
        [sys.executable, "-m", "nexus_cli", "approvals", "deny", approval_id, "--expect-seq-id", "9"],
        env=dict(env), cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "APPROVAL_MISMATCH" in refused.stdout, refused.stdout + refused.stderr
    assert approval_id in nexus_command("approvals", "list", env=env)  # still pending
    denied = nexus_command("approvals", "deny", approval_id, "--expect-data-sha256", sha_of(payment["data"]), env=env)
    assert "REJECTED APPROVAL_DENIED" in denied


async def test_the_console_lists_pending_approvals_with_their_binding(db: Database, browser: httpx.AsyncClient) -> None:
    """/console/approvals shows a held payment's event_id, data_sha256, process version and seq."""
    gateway = Gateway(db, catalog=await register(db, None))
    steps = [step_json("held-c", "hc", s, process="order_reviewed") for s in (1, 2, 3)]
    steps[0]["data"].update(items=[{"product_id": "p", "quantity": 1, "unit_price": 1500}], total_amount=1500)
    steps[2]["data"]["amount"] = 1500
    outcomes = await gateway.submit([Incoming.parse(s) for s in steps])
    assert outcomes[-1].approval_id is not None
    await sign_in(browser)
    page = await browser.get("/console/approvals")
    assert page.status_code == 200
    row = page.text.split('class="approval"')[1].split("</tr>")[0]
    assert str(outcomes[-1].approval_id) in row and steps[2]["event_id"] in row
    assert sha_of(steps[2]["data"]) in row and '<td class="n seq-id">3</td>' in row
    assert '<td class="n process-version">2</td>' in row


async def test_the_sdk_reads_the_binding_and_answers_expecting_it(api: httpx.AsyncClient) -> None:
    """The client SDK's `approvals()` carries the binding; `answer_approval(expect=...)` of another seq raises
    the 409 APPROVAL_MISMATCH, and with `approval.expect()` it approves."""
    from nexus_client import AsyncNexusClient
    from nexus_client.errors import ApiError
    from tests.integration.test_client_sdk import config_for

    approval_id, payment = await held_order(api, "o-sdk")
    async with AsyncNexusClient(config_for(str(api.base_url).rstrip("/"))) as client:
        [approval] = await client.approvals()
        assert (approval.data_sha256, approval.process_version, approval.seq_id) == (sha_of(payment["data"]), 2, 3)
        with pytest.raises(ApiError) as refused:
            await client.answer_approval(approval_id, approve=True, expect={**approval.expect(), "seq_id": 4})
        assert (refused.value.status, refused.value.code) == (409, "APPROVAL_MISMATCH")
        answer = await client.answer_approval(approval_id, approve=True, expect=approval.expect())
    assert answer.result.decision == "APPLY"
