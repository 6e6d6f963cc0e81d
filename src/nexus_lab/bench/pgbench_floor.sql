-- The per-event floor of `nexus bench --suite wrk`, run by pgbench in the same run as wrk: the naive
-- transaction a gateway would need for one in-order step (as the raw scenario's RAW_* statements), with
-- no decision, no batching and no HTTP. Each pgbench client owns its orders and sends their steps in
-- order: k counts the client's transactions (-D k=-1), order k/5, seq k%5+1. Run with -M prepared.
-- The payload's colons are followed by a space: pgbench would read ":name" as a variable.
\set k :k + 1
\set o :k / 5
\set seq :k % 5 + 1
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('pgb-' || :run::text || '-' || :client_id::text || '-' || :o::text, 0));
SELECT last_seq FROM orders WHERE order_id = 'pgb-' || :run::text || '-' || :client_id::text || '-' || :o::text;
INSERT INTO orders (order_id, plan_id, status, last_seq, outbox_count)
  VALUES ('pgb-' || :run::text || '-' || :client_id::text || '-' || :o::text, 'pgb-plan', 'created', :seq, :seq)
  ON CONFLICT (tenant_id, order_id) DO UPDATE SET status = EXCLUDED.status, last_seq = EXCLUDED.last_seq,
  outbox_count = EXCLUDED.outbox_count, updated_at = now();
INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload)
  VALUES (gen_random_uuid(), 'pgb-' || :run::text || '-' || :client_id::text || '-' || :o::text, :seq,
  gen_random_uuid(), 'OrderCreated', :seq, 'pgb-plan',
  '{"event_id": "00000000-0000-4000-8000-000000000000", "event_type": "OrderCreated", "plan_id": "pgb-plan", "order_id": "pgb", "seq_id": 1, "timestamp": "2026-01-01T00:00:00Z", "schema_version": "1.0", "data": {}, "tenant_id": "default", "correlation_id": null}'::jsonb);
END;
