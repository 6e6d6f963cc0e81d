"""`nexus ...` whose saga executors derive a new Idempotency-Key for every attempt of a call.

A call repeated after a crash (or a timeout) is then a new call to the service: the charge happens twice.
The saga checker must catch it.
"""

from __future__ import annotations

import sys

from nexus.core.saga import Action, idempotency_key


def key_per_attempt(secret: bytes, tenant: str, order: str, plan: str, step: str, action: Action, attempt: int) -> str:
    return idempotency_key(secret, tenant, order, plan, f"{step}#{attempt}", action)


def main() -> int:
    from nexus.saga import executor

    executor.derived_key = key_per_attempt
    original = executor.SagaExecutor.__init__

    def patched(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["key_function"] = key_per_attempt
        original(self, *args, **kwargs)

    executor.SagaExecutor.__init__ = patched  # type: ignore[method-assign]
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
