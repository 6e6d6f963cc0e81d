"""`make studio-check`: LangGraph Studio's server (`langgraph dev`) runs the LLM planner graph, offline.

Starts `nexus fake-llm`, `nexus serve` (embedded PostgreSQL in a temporary --data-dir) and `langgraph dev
--no-browser --no-reload` on `langgraph.json` (analytics and tracing off, the planner wired by
`NEXUS_GATEWAY_URL` and `NEXUS_LLM_*`), asks its local API for a stateless run of `nexus-llm-planner`
(`POST /runs/wait`) on one order, and checks that the run completed the order at the gateway. Exit 0 when
it did; stops everything it started. On a failure it keeps its temporary directory (each process's log)
and names it. Needs the `studio` extra (`pip install -e '.[studio]'`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

import httpx

from nexus.auth.roles import Role
from nexus_lab.llm.runner import plan_input
from nexus_lab.procs import REPO_ROOT, Proc, free_port, new_keys, nexus, wait_ready

OFFLINE = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_API_KEY": "",
}


async def _main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="nexus-studio-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    llm_port, http_port, studio_port = free_port(), free_port(), free_port()
    gateway_url = f"http://127.0.0.1:{http_port}"
    children: list[Proc] = []
    ok = False
    try:
        children.append(
            nexus(
                "fake-llm", ["fake-llm", "--port", str(llm_port), "--behaviours", "wrong_amount"], env, tmp / "fake.out"
            ).start()
        )
        serve = ["serve", "--data-dir", str(tmp / "data"), "--http-port", str(http_port), "--no-dispatcher"]
        children.append(nexus("gateway", serve, env, tmp / "serve.out").start())
        await wait_ready(children[0], f"http://127.0.0.1:{llm_port}/healthz", 30)
        await wait_ready(children[1], gateway_url + "/readyz", 120)
        (key,) = await new_keys(tmp / "data", ("default", Role.AGENT, "studio-check-agent"))
        children.append(_studio_proc(env, tmp, gateway_url, key, (llm_port, studio_port)).start())
        studio = f"http://127.0.0.1:{studio_port}"
        await wait_ready(children[2], studio + "/ok", 120)
        print(f"studio-check: langgraph dev serving the planner graph at {studio}", flush=True)
        ok = await _run_planner(studio, gateway_url, key)
    except (OSError, RuntimeError, TimeoutError, httpx.HTTPError) as exc:
        print(f"studio-check: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        for child in reversed(children):
            child.stop(15.0)
        # The logs go only once every process has stopped, and only after a success: a failure names them.
        if ok and "--keep" not in sys.argv:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            logs = ", ".join(sorted(p.name for p in tmp.glob("*.out"))) or "none written"  # noqa: ASYNC240 - a few names listed once the processes stopped
            print(f"studio-check: logs kept in {tmp} ({logs})", file=sys.stderr)
    return 0 if ok else 1


def _studio_proc(env: dict[str, str], tmp: Path, gateway_url: str, key: str, ports: tuple[int, int]) -> Proc:
    """`langgraph dev` serving the planner graph, its model the fake LLM on `ports[0]`, on `ports[1]`."""
    llm_port, studio_port = ports
    langgraph = str(Path(sys.executable).with_name("langgraph"))
    studio_env = {
        **env,
        **OFFLINE,
        "NEXUS_GATEWAY_URL": gateway_url,
        "NEXUS_API_KEY": key,
        "NEXUS_LLM_BASE_URL": f"http://127.0.0.1:{llm_port}/v1",
        "NEXUS_LLM_MODEL": "nexus-fake-1",
    }
    cmd = [
        langgraph,
        "dev",
        "--no-browser",
        "--no-reload",
        "--port",
        str(studio_port),
        "--config",
        str(REPO_ROOT / "langgraph.json"),
    ]
    return Proc("langgraph-dev", cmd, studio_env, tmp / "studio.out")


async def _run_planner(studio: str, gateway_url: str, key: str) -> bool:
    """One run of the planner graph through the studio's API: it completes, and so does the gateway's order."""
    start = plan_input("studio", 0)
    async with httpx.AsyncClient(base_url=studio, timeout=120) as client:
        assistants = (await client.post("/assistants/search", json={"graph_id": "nexus-llm-planner"})).json()
        run = await client.post("/runs/wait", json={"assistant_id": "nexus-llm-planner", "input": start})
        run.raise_for_status()
        output = run.json()
        if "--keep" in sys.argv:
            print(run.text[:3000])
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=auth) as gateway:
            order = (await gateway.get(f"{gateway_url}/v1/orders/{start['order_id']}")).json()
    counts = output.get("counts", {})
    print(
        f"studio-check: {len(assistants)} assistant(s); run of nexus-llm-planner -> status {output.get('status')}, "
        f"last_seq {output.get('last_seq')}, rejections {counts.get('rejections')}; "
        f"the gateway says {order.get('status')}"
    )
    ok = bool(
        output.get("status") == "completed" == order.get("status") and counts.get("rejections") == {"CHECK_FAILED": 1}
    )
    print("studio-check: ok" if ok else "studio-check: FAILED")
    return ok


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
