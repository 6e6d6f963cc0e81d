"""The hash-chained, signed decision log and the blocked-actions report (adapters of core/audit_chain.py and
core/audit_verify.py)."""
