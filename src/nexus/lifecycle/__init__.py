"""The plan lifecycle around the decision table: history, waiting, deadlines, approvals and the
decisions outbox to Kafka. The decisions themselves stay in `nexus.core.sequencing`."""
