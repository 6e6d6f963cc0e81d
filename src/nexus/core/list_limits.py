"""The `max_list_items` limit: no list in a step's data may hold more items. Pure: no I/O.

Why: a step's checks are CEL rules evaluated under the order's lock, on the event loop; what a rule costs
grows with the lists it walks, and a 1 MiB body holds ~20,000 items. The limit bounds every list (nested
ones too) before any rule runs, and `core/rule_cost.py` refuses, when a definition is loaded, the rules
whose cost would still grow faster than linearly under it. Together they bound the CPU of any one step.

Where the limit comes from (the lowest wins):

* the process definition's `max_list_items` (default `DEFAULT_MAX_LIST_ITEMS`, 1,000): the bound its
  rules were analysed against, so a tenant can never raise it past what the analysis assumed;
* the tenant's `max_list_items` (`nexus tenants set-limit TENANT --max-list-items N`), which may only
  lower it.

Beyond it the step is REJECTED with code LIMIT_EXCEEDED and check `max_list_items` (422 for a single
envelope), before its data schema or any rule is evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_MAX_LIST_ITEMS = 1000
CHECK_ID = "max_list_items"
"""The `check` of the REJECTED answer, as a CEL check's id would be."""
TENANT_KEY = "max_list_items"
"""The key of the tenant's limit among its `limits`."""


def tenant_limits(max_order_amount: Any, max_list_items: int | None) -> dict[str, Any]:
    """A tenant's `limits` as its row holds them (`max_list_items` only when it has one of its own)."""
    limits: dict[str, Any] = {"max_order_amount": max_order_amount}
    if max_list_items is not None:
        limits[TENANT_KEY] = max_list_items
    return limits


def effective_limit(process_limit: int | None, tenant_limits: Mapping[str, Any]) -> int:
    """The limit a step is held to: the process's (default 1,000), lowered by the tenant's if it has one."""
    limit = process_limit if process_limit is not None else DEFAULT_MAX_LIST_ITEMS
    tenant = tenant_limits.get(TENANT_KEY)
    if isinstance(tenant, int) and not isinstance(tenant, bool) and 0 < tenant < limit:
        return tenant
    return limit


def longest_list(value: Any, limit: int) -> int | None:
    """The size of the first list found holding more than `limit` items (nested lists included); None when
    every list is within the limit. Walks each container once (its depth is bounded by the parser); data
    comes from JSON, so only dicts and lists are containers (exact types: an ABC check per item would cost
    more than the rest of the walk)."""
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is list or kind is tuple:
            if len(node) > limit:
                return len(node)
            stack.extend(item for item in node if type(item) in _CONTAINERS)
        elif kind is dict or isinstance(node, Mapping):
            stack.extend(item for item in node.values() if type(item) in _CONTAINERS)
    return None


_CONTAINERS = (list, tuple, dict)


def list_limit_message(
    data: Mapping[str, Any], process_limit: int | None, tenant_limits: Mapping[str, Any]
) -> str | None:
    """Why a step's data breaks the list limit (the REJECTED message, which names no key of the data: it
    never echoes input), or None when it does not."""
    limit = effective_limit(process_limit, tenant_limits)
    size = longest_list(data, limit)
    if size is None:
        return None
    return f"a list in the step's data holds {size} items; at most {limit} are allowed (max_list_items)"
