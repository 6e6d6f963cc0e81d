"""The lab: everything that exercises the gateway from outside (agent, sink, checker, chaos, bench, demo).

It reaches the gateway through the client SDK (`nexus_client`) and the public API; the checker reads
PostgreSQL (read-only) and the harnesses start `nexus` processes."""
