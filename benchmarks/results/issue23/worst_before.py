"""The worst step of order v1 (main) and order v2 (this branch) at 1,000 items, in-process CPU, median of 3."""

import statistics
import time
from decimal import Decimal

from nexus.core.process_checks import validate_step
from nexus.processes import builtin_catalog

items = [{"product_id": f"p{i}", "quantity": 1 + i % 3, "unit_price": "1.25"} for i in range(1000)]
total = str(sum(Decimal(i["unit_price"]) * i["quantity"] for i in items))
order = builtin_catalog().latest["order"]
created = {"user_id": "u", "items": items, "total_amount": total, "currency": "USD"}
facts = order.facts_after({}, "OrderCreated", created)
for step, status, data in [
    ("OrderCreated", None, created),
    ("InventoryValidated", "created", {"warehouse_id": "w", "reserved_items": items[::-1]}),
]:
    times = []
    for _ in range(3):
        t = time.process_time()
        v = validate_step(
            order,
            status,
            facts if status else {},
            step,
            1 if status is None else 2,
            data,
            {"max_order_amount": Decimal(100000)},
        )
        times.append(time.process_time() - t)
    print(f"order v{order.version} {step}: {statistics.median(times) * 1000:.0f} ms CPU, verdict {v}")
