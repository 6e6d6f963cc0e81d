"""Ingress adapters: they parse what arrives and hand it to `Gateway.submit`."""
