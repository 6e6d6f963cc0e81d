"""An agent that never counts: the gateway numbers its steps. NEXUS_GATEWAY_URL, NEXUS_API_KEY (an agent key)."""

from nexus_client import NexusClient

ITEMS = [{"product_id": "book", "quantity": 2, "unit_price": 12.5}]
PLAN = [
    ("OrderCreated", {"user_id": "u-1", "items": ITEMS, "total_amount": 25, "currency": "USD"}),
    ("InventoryValidated", {"warehouse_id": "w-1"}),
    ("PaymentProcessed", {"payment_id": "pay-1", "amount": 52, "currency": "USD"}),  # a hallucinated amount
    ("OrderShipped", {"carrier": "ups"}),
    ("OrderCompleted", {}),
]


def main() -> None:
    with NexusClient() as client:
        run = client.start_plan("order")
        for step, data in PLAN:
            result = run.step(step, data)
            if result.decision == "REJECTED":  # the gateway says why; correct the step and propose it again
                print(f"{step}: REJECTED {result.code} {result.message}")
                result = run.step(step, {**data, "amount": 25})
            print(f"{step}: {result.decision} as seq {result.seq_id}, order {result.order.status}")
        print(f"{run.order_id}: {client.order(run.order_id).status}")


if __name__ == "__main__":
    main()
