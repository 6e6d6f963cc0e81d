"""The hash-chained, signed decision log and the blocked-actions report (adapters of core/audit.py)."""
