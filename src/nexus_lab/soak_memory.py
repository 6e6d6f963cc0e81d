"""PostgreSQL's memory as the soak judges it: what a leak would move, not how many processes exist or which of
them last touched the shared buffers.

A process's private memory (USS) counts every page only it maps, and that includes the pages of PostgreSQL's
shared memory (the anonymous `/dev/zero` segment of the shared buffers, `/dev/shm` dynamic segments) that no
other process has touched lately: a checkpointer that just wrote 50 MB of buffers holds them as "private",
and the sum over the postmaster's tree moves with the number of backends, autovacuum and parallel workers that
exist at the instant. Shared memory has a fixed size (set at start); a leak grows a process's own heap. So the
judged figure (`steady_mb`) is each process's private memory outside shared segments ("own" memory), summed
over the processes that live as long as the server (the postmaster and its server processes: one of each) plus
the median client backend of those that have worked (a leak every connection accumulates moves it; the pools'
size and how many of their connections are still unused do not).
"""

from __future__ import annotations

import contextlib
import statistics

import psutil

SHARED_SEGMENTS = ("/dev/zero", "/SYSV", "/dev/shm/")  # noqa: S108 - paths in a memory map, not files
"""Mappings of PostgreSQL's shared memory (main segment, System V header, dynamic segments): not a process's own."""

SERVER_PROCESSES = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "logical replication launcher",
    "archiver",
)
"""The postmaster's children that live as long as it does, one of each (by their process title)."""

POSTMASTER = "postmaster"
BACKEND = "client backend"
TRANSIENT = ("autovacuum worker", "parallel worker")
WORKED_SHARE = 0.5


def kind_of(proc: psutil.Process, postmaster: int) -> str:
    """Which of PostgreSQL's processes `proc` is, by its title (`postgres: checkpointer`, `postgres: user db
    [local] idle`): the postmaster, a server process, a transient worker or a client backend."""
    if proc.pid == postmaster:
        return POSTMASTER
    title = " ".join(proc.cmdline()).removeprefix("postgres: ")
    return next((kind for kind in (*SERVER_PROCESSES, *TRANSIENT) if title.startswith(kind)), BACKEND)


def own_mb(proc: psutil.Process) -> float:
    """Private memory of `proc` outside PostgreSQL's shared segments, in MB."""
    private: int = sum(
        m.private_clean + m.private_dirty for m in proc.memory_maps() if not m.path.startswith(SHARED_SEGMENTS)
    )
    return private / 1e6


def postgres_memory(postmaster: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The PostgreSQL server `postmaster`'s figures in MB, `postgres` (judged: `steady_mb`) and `postgres-uss` (the
    private memory of all its processes, shown), and each process's own memory by kind (nothing while it is down)."""
    by_kind: dict[str, list[float]] = {}
    uss = 0
    try:
        root = psutil.Process(postmaster) if postmaster else None
        procs = [root, *root.children(recursive=True)] if root else []
    except psutil.Error:
        procs = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            by_kind.setdefault(kind_of(proc, postmaster), []).append(round(own_mb(proc), 2))
            uss += proc.memory_full_info().uss
    if not by_kind:
        return {}, by_kind
    return {"postgres": round(steady_mb(by_kind), 1), "postgres-uss": round(uss / 1e6, 1)}, by_kind


def steady_mb(by_kind: dict[str, list[float]]) -> float:
    """The judged figure: the postmaster's and its server processes' own memory plus the median of the client
    backends that have worked (`worked_backends`)."""
    server = sum(sum(by_kind.get(kind, [])) for kind in (POSTMASTER, *SERVER_PROCESSES))
    worked = worked_backends(by_kind.get(BACKEND, []))
    return server + (statistics.median(worked) if worked else 0.0)


def worked_backends(backends: list[float]) -> list[float]:
    """The client backends holding at least `WORKED_SHARE` of the largest one's own memory. A connection that has
    run the gateway's statements holds its caches (~9-11 MB in the soak), one a pool opened and has not used yet
    ~1 MB; the median of them all jumped between the two (9.0 -> 1.2 MB within a minute of round 15's first run)
    with how many of each the pools held."""
    largest = max(backends, default=0.0)
    return [mb for mb in backends if mb >= WORKED_SHARE * largest]


def trend(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The Theil-Sen line through (minute, MB) points, at the first and the last minute: the median of the
    slopes between every pair, through the median of the points' intercepts. One point off the line (a sample
    taken as a vacuum ran) does not move it; a steady growth is its slope."""
    if len(points) < 2:
        value = points[0][1] if points else 0.0
        return value, value
    slopes = [(b - a) / (x2 - x1) for i, (x1, a) in enumerate(points) for x2, b in points[i + 1 :] if x2 != x1]
    slope = statistics.median(slopes) if slopes else 0.0
    intercept = statistics.median(y - slope * x for x, y in points)
    first, last = points[0][0], points[-1][0]
    return intercept + slope * first, intercept + slope * last
