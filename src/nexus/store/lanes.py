"""The heavy lanes' PostgreSQL connections: a pool of their own.

The group commit's heavy lanes (`nexus.ingress.batcher`: slices of 1,000-envelope batches, 1,000-line steps)
run their transactions in a task that sets `HEAVY_LANE`; `Database.lane_pool` then hands them connections of
the heavy pool (`NEXUS_HEAVY_DB_CONNECTIONS` at most: so at most that many heavy transactions are in
PostgreSQL at once, whatever the number of heavy lanes), and every other transaction the main pool's.
"""

from __future__ import annotations

import contextvars

HEAVY_LANE: contextvars.ContextVar[bool | None] = contextvars.ContextVar("nexus_heavy_lane", default=None)
"""True in a heavy lane's task: its transactions take the heavy pool's connections, and fold on the fold thread
(`nexus.fold_thread`); False in a light lane's (the main pool, folded inline); None outside the group commit
(the main pool; the fold thread weighs the items itself)."""
