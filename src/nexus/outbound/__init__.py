"""Outbound HTTP: the one policy every call leaving the gateway follows (`policy`), and its client (`http1`)."""
