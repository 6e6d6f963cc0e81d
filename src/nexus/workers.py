"""`nexus serve --workers N`: one supervisor, N HTTP processes sharing one listening socket.

The supervisor binds the port once and starts N processes (multiprocessing, spawn: fresh interpreters,
nothing inherited but the socket and the settings), each running `nexus.app.serve` on that socket with
its own event loop, pool, group commit and LISTEN connection. The kernel hands each new connection to
one of them. The services that need to run once (sweepers, audit checkpointer, dispatcher, saga
executor, metrics listener, Kafka consumer) run in the first process only (`background=True`).

What stays correct across processes:
- metrics: the supervisor points PROMETHEUS_MULTIPROC_DIR at a fresh directory before any process imports
  prometheus_client; every process's `/metrics` shows the series of all (nexus.metrics), and the
  directory is removed at exit;
- rate limits: each process grants limit / N (`rate_limit_processes` defaults to `workers`);
- console sessions: in PostgreSQL (nexus.auth.sessions), so any process knows them.

Failure policy: a process that dies (or a background service of the first that stops it) takes the
whole serve down with a non-zero exit, like a single-process serve whose service fails; a process
supervisor (systemd, Kubernetes) restarts it. SIGTERM/SIGINT to the supervisor stop every process
(SIGTERM, then SIGKILL after `workers_stop_s`); a process whose supervisor dies is sent SIGTERM by the
kernel (PR_SET_PDEATHSIG), so none is left behind. The supervisor itself does no request work.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from nexus.settings import Settings

log = logging.getLogger(__name__)

METRICS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
_PR_SET_PDEATHSIG = 1


def run_workers(settings: Settings, *, dispatcher: bool, kafka: bool) -> int:
    """Supervise `settings.workers` HTTP processes until a signal (0) or the death of one of them (1)."""
    metrics_dir = tempfile.mkdtemp(prefix="nexus-metrics-")
    os.environ[METRICS_DIR_VARIABLE] = metrics_dir  # inherited by the processes spawned below
    embedded = None
    listener = None
    try:
        if settings.database_url is None:  # one embedded server for every process, started here
            settings.check_database()
            from nexus.store.embedded import EmbeddedPostgres

            embedded = EmbeddedPostgres(settings.data_dir)
            settings = settings.replace(database_url=embedded.start())
        from nexus.audit.signing import load_signing_key

        load_signing_key(settings)  # created here once, not raced by N processes on a fresh data dir
        try:
            listener = _bind(settings)
        except OSError as exc:
            print(f"nexus serve: cannot listen on {settings.http_host}:{settings.http_port}: {exc}", file=sys.stderr)
            return 1
        return _supervise(settings, listener, metrics_dir, dispatcher=dispatcher, kafka=kafka)
    finally:
        if listener is not None:
            listener.close()
        if embedded is not None:
            embedded.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
        os.environ.pop(METRICS_DIR_VARIABLE, None)


def _bind(settings: Settings) -> socket.socket:
    """The listening socket every process accepts on (as uvicorn binds it for its own workers)."""
    family = socket.AF_INET6 if ":" in settings.http_host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.http_host, settings.http_port))
    sock.listen(settings.http_backlog)
    sock.set_inheritable(True)
    return sock


def _supervise(settings: Settings, sock: socket.socket, metrics_dir: str, *, dispatcher: bool, kafka: bool) -> int:
    context = multiprocessing.get_context("spawn")
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    stop_signals: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_signals.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    processes: list[BaseProcess] = []
    waiting: list[Connection] = []  # a worker's pipe, until it said it serves
    failed = False
    try:
        for index in range(settings.workers):
            ready_r, ready_w = context.Pipe(duplex=False)
            process = context.Process(
                target=worker_main,
                name=f"nexus-worker-{index}",
                args=(index, settings, sock, ready_w, metrics_dir, os.getpid(), dispatcher, kafka),
            )
            process.start()
            ready_w.close()
            processes.append(process)
            waiting.append(ready_r)
        sentinels = {p.sentinel: p for p in processes}
        while not stop_signals and not failed:
            ready = multiprocessing.connection.wait([wake_r, *waiting, *sentinels])
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    wake_r.recv(64)
            for conn in waiting[:]:
                if conn in ready:
                    waiting.remove(conn)
                    with contextlib.suppress(EOFError):  # EOF: it died first (its sentinel says so)
                        conn.recv()
                        if not waiting:
                            host, port = sock.getsockname()[:2]
                            print(f"nexus serving at http://{host}:{port} ({len(processes)} workers)", flush=True)
            for sentinel, dead in sentinels.items():
                if sentinel in ready:
                    dead.join(1.0)  # its sentinel is ready: it has ended; join reads its exit code
                    print(f"nexus serve: worker {dead.name} (pid {dead.pid}) exited {dead.exitcode}; stopping",
                          file=sys.stderr, flush=True)  # fmt: skip
                    failed = True
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        failed = _stop_all(processes, settings.workers_stop_s, metrics_dir) or failed
        wake_r.close()
        wake_w.close()
    return 1 if failed else 0


def _stop_all(processes: list[BaseProcess], timeout_s: float, metrics_dir: str) -> bool:
    """SIGTERM every live process, SIGKILL those still running after `timeout_s`; True if one failed."""
    for process in processes:
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            log.warning("worker did not stop in time; killing it", extra={"action": "worker_kill", "pid": process.pid})
            process.kill()
            process.join()
    from prometheus_client import multiprocess

    for process in processes:
        if process.pid is not None:
            multiprocess.mark_process_dead(process.pid, metrics_dir)  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped
    # Stopped by our SIGTERM before its handlers were installed (still starting) is a clean stop too.
    return any(p.exitcode not in (0, -signal.SIGTERM) for p in processes)


def worker_main(
    index: int,
    settings: Settings,
    sock: socket.socket,
    ready: Any,
    metrics_dir: str,
    parent_pid: int,
    dispatcher: bool,
    kafka: bool,
) -> None:
    """One HTTP process (in a spawned interpreter): `serve` on the supervisor's socket until SIGTERM."""
    _die_with_parent(parent_pid)
    from nexus import metrics
    from nexus.app import run_until_stopped
    from nexus.logging import setup_logging

    setup_logging(settings.log_level)
    metrics.expose_all_processes(metrics_dir)

    def on_ready(_: str) -> None:
        ready.send(index)
        ready.close()

    code = run_until_stopped(
        settings,
        name=f"nexus serve (worker {index})",
        dispatcher=dispatcher and index == 0,
        kafka=kafka and index == 0,
        background=index == 0,
        sockets=[sock],
        on_ready=on_ready,
    )
    sys.exit(code)


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGTERM this process when the supervisor dies (Linux); exit if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:
        sys.exit(1)
