"""Delivery of the outbox as signed webhooks: subscriptions, the dispatcher, signing, CLI and API."""
