"""The agent: a LangGraph planner that proposes an order's steps, simulated failures, hostile-agent modes,
and the transports (HTTP, Kafka) that hand each step to the gateway."""
