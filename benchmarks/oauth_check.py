"""Cost of one credential check: an OAuth access token beside an API key, in process, same run.

* key: what the gateway does per request for a key it has seen within `auth_cache_ttl_s` (SHA-256 of the key,
  `KeyCache.check_hash` answered from its cache; a miss adds one PostgreSQL query per key per second);
* token, first sight: the verification `OAuthVerifier.check` does for a token it has not accepted before, an
  RS256 access token of the lab's issuer, its JWKS cached (header and claims decoded, the signature verified,
  audience, expiry, tenant and roles read);
* token, seen: `OAuthVerifier.check` of the same token again (answered from memory until it expires).

Rounds alternate (key, first sight, seen, key...); each round times `--checks` checks; the figure is the median
round's microseconds per check, and the ratio token / key of the medians.

Usage: ``.venv/bin/python benchmarks/oauth_check.py [--rounds 7] [--checks 2000]``. No database needed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from nexus.auth.keys import KeyCache, generate_key, hash_key
from nexus.auth.oauth import OAuthVerifier
from nexus.auth.roles import Principal, Role
from nexus.settings import Settings
from nexus_lab.oauth_issuer import Issuer, serve

AUDIENCE = "https://gateway.example"


async def measure(rounds: int, checks: int) -> dict[str, list[float]]:
    """Microseconds per check of each kind, one figure per round."""
    key = generate_key()
    cache = KeyCache(db=None, ttl_s=1e9)  # type: ignore[arg-type]  # answered from its cache only
    cache._entries[hash_key(key)] = (float("inf"), Principal(1, "acme", frozenset({Role.AGENT})))
    figures: dict[str, list[float]] = {"key": [], "token, first sight": [], "token, seen": []}
    with serve(Issuer({"alice": {"tenant": "acme", "roles": ["agent"]}})) as issuer:
        verifier = OAuthVerifier(Settings(public_url=AUDIENCE, oauth_issuers=issuer.url))
        token = issuer.issue("alice", "nexus:agent", AUDIENCE, "bench")
        assert isinstance(await verifier.check(token), Principal)  # warm: discovery and JWKS fetched
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(checks):
                await cache.check_hash(hash_key(key))
            figures["key"].append((time.perf_counter() - started) / checks * 1e6)
            started = time.perf_counter()
            for _ in range(checks):
                await verifier._verify(token)
            figures["token, first sight"].append((time.perf_counter() - started) / checks * 1e6)
            started = time.perf_counter()
            for _ in range(checks):
                await verifier.check(token)
            figures["token, seen"].append((time.perf_counter() - started) / checks * 1e6)
        await verifier.aclose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--checks", type=int, default=2000)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.rounds, args.checks))
    medians = {kind: statistics.median(values) for kind, values in figures.items()}
    for kind, values in figures.items():
        print(f"{kind:18} median {medians[kind]:8.2f} us/check  rounds {[round(v, 2) for v in values]}")
    for kind in ("token, first sight", "token, seen"):
        print(f"{kind} / key: {medians[kind] / medians['key']:.1f}x")


if __name__ == "__main__":
    main()
