-- Queries of Gateway.submit: one transaction per batch, set-based whatever the batch size.

-- name: lock_orders
-- Advisory locks in one fixed order (by key), so two batches never deadlock on each other; an order's key is
-- nexus_order_lock's (migration 0044).
SELECT pg_advisory_xact_lock(k)
FROM (SELECT DISTINCT nexus_order_lock(t, o) AS k
      FROM unnest($1::text[], $2::text[]) AS u(t, o) ORDER BY k OFFSET 0) AS keys;

-- name: begin_locked
-- BEGIN and lock_orders' locks in one simple-protocol query (nexus.store.locked): that protocol takes no
-- parameters, so the placeholder `keys` in braces below is replaced by the hex of the (tenant, order) pairs'
-- JSON array (only 0-9a-f reaches the text).
BEGIN; SELECT pg_advisory_xact_lock(k)
FROM (SELECT DISTINCT nexus_order_lock(r->>0, r->>1) AS k
      FROM jsonb_array_elements(convert_from(decode('{keys}', 'hex'), 'UTF8')::jsonb) AS r
      ORDER BY k OFFSET 0) AS keys;

-- name: insert_rejected
INSERT INTO rejected_events (event_id, order_id, plan_id, tenant_id, seq_id, event_type, code, check_id, message,
                             drained, envelope)
SELECT event_id, order_id, plan_id, tenant_id, seq_id, event_type, code, check_id, message, drained, envelope::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[], $8::text[],
            $9::text[], $10::bool[], $11::text[])
    AS u(event_id, order_id, plan_id, tenant_id, seq_id, event_type, code, check_id, message, drained, envelope)
ON CONFLICT (tenant_id, event_id) DO NOTHING;

-- name: insert_pending
INSERT INTO pending_events (order_id, seq_id, event_id, plan_id, envelope, traceparent, tenant_id)
SELECT order_id, seq_id, event_id, plan_id, envelope::jsonb, traceparent, tenant_id
FROM unnest($1::text[], $2::int[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[])
    AS u(order_id, seq_id, event_id, plan_id, envelope, traceparent, tenant_id);

-- name: delete_pending
-- The buffered steps applied, deleted by key: $1 orders, $2 seqs, $3 tenants (migration 0046, `nexus_delete_pending`).
SELECT nexus_delete_pending($1::text[], $2::int[], $3::text[]);
-- name: insert_dead_letters
INSERT INTO dead_letters (source, code, error, event_id, order_id, plan_id, payload, tenant_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::text[])
RETURNING id;

-- name: expiry_candidates
-- Sagas (issue 38): an order whose buffered steps wait behind an effect still being performed (or retried) is
-- not a candidate; its steps' timeout counts from the effect's end (read_buffered).
SELECT DISTINCT p.tenant_id, p.order_id FROM pending_events AS p
WHERE p.received_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM saga_steps AS st
                  WHERE st.tenant_id = p.tenant_id AND st.order_id = p.order_id AND st.seq < p.seq_id
                    AND st.status IN ('PENDING', 'RUNNING'))
LIMIT $2;

-- name: read_buffered
-- The buffered steps of the locked orders $1/$2 (tenants, orders), oldest first, each with its saga's last step
-- before it and the database's clock (migration 0046, `nexus_read_buffered`, which documents the columns).
SELECT * FROM nexus_read_buffered($1::text[], $2::text[]);
-- name: notify_orders
-- wakes the waiters of these orders (long poll, SSE) at commit, and only then. The payload is
-- {"tenant", "order_id"} (an order is the pair).
SELECT pg_notify('nexus_orders', json_build_object('tenant', t, 'order_id', o)::text)
FROM unnest($1::text[], $2::text[]) AS u(t, o);

-- the batch in fewer round trips (lock; one read; one write of the usual rows)

-- name: read_batch
-- Everything `Gateway.submit` reads of a batch's orders after `lock_orders`, in one statement (migration 0046,
-- `nexus_read_batch`, which documents each kind of row): $1/$2 the (tenant, order) pairs, $3 the tenants, $4
-- whether steps are validated (the tenants' limits and held steps), $5/$6 the orders of server-numbered steps and
-- $7 their event ids. A function planned for reads by key whatever the tables' statistics say.
SELECT * FROM nexus_read_batch($1::text[], $2::text[], $3::text[], $4::bool, $5::text[], $6::text[], $7::uuid[]);

-- name: write_batch
-- The usual writes of a batch in one statement (migration 0046, `nexus_write_batch`, which documents each
-- parameter): orders ($1), notifications ($2) with their deliveries, the decision log's records ($3, all at $4),
-- the wake-up of the waiters of orders $5/$6, a Kafka batch's decisions ($7), the first verdicts of newly numbered
-- steps ($8), and the orders' quota counts ($9-$12). A function planned for reads by key whatever the tables'
-- statistics say.
SELECT * FROM nexus_write_batch($1::jsonb, $2::jsonb, $3::jsonb, $4::timestamptz, $5::text[], $6::text[], $7::jsonb,
                                $8::jsonb, $9::text[], $10::int[], $11::text[], $12::text[]);
