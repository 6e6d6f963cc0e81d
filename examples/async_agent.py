"""The same agent on the async client, resuming its plan as a restarted agent would."""

import asyncio

from nexus_client import AsyncNexusClient

ITEMS = [{"product_id": "lamp", "quantity": 1, "unit_price": 40}]
PLAN = [
    ("OrderCreated", {"user_id": "u-2", "items": ITEMS, "total_amount": 40, "currency": "USD"}),
    ("InventoryValidated", {"warehouse_id": "w-2"}),
    ("PaymentProcessed", {"payment_id": "pay-2", "amount": 40, "currency": "USD"}),
    ("OrderShipped", {"carrier": "dhl"}),
    ("OrderCompleted", {}),
]


async def main() -> None:
    async with AsyncNexusClient() as client:
        started = await client.start_plan("order")
        first = await started.step(*PLAN[0], idempotency_key="create")
        again = await started.step(*PLAN[0], idempotency_key="create")  # a retried call: not applied twice
        print(f"OrderCreated: {first.decision}, retried: {again.decision} (first {again.first['decision']})")
        run = await client.resume_plan(started.order_id)  # after a restart: the gateway knows where it is
        for step, data in PLAN[1:]:
            result = await run.step(step, data)
            print(f"{step}: {result.decision} as seq {result.seq_id}, order {result.order.status}")
        print(f"{run.order_id}: {(await client.order(run.order_id)).status}")


if __name__ == "__main__":
    asyncio.run(main())
