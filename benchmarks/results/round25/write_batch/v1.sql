-- (Its decision-log part repeats audit.sql `insert_records`, kept in this one statement for the round trip.)
-- The usual writes of a batch in one statement: orders ($1, upserted), notifications ($2) with their
-- deliveries (one per matching subscription, from the rows just inserted; a delivery is its pair's head
-- when no earlier one is pending) and the dispatchers' wake-up, the decision log's records ($3, as
-- audit.sql insert_records, all at $4), the wake-up of the waiters of orders $5/$6 (as notify_orders), and a
-- Kafka batch's decisions for the `nexus.decisions` topic ($7, in order: the relay sends them by id), and
-- the first verdicts of newly numbered steps ($8, `plan_steps`: a second first verdict is never written).
-- $1-$3, $7 and $8 are each one JSON array of rows, a row an array of its columns in the order below (the hashes
-- of $3 in hex): one parameter per table rather than one array per column, which cost the gateway more to
-- encode (per element) than everything else it sends. An order's finished_at follows its row's `finished` (the
-- fold decides it, core/decide/finished.py; migration 0043): stamped now() the first time, kept afterwards.
-- The orders' counts (migration 0045: no trigger counts them): `prior` reads, in the statement's snapshot (before
-- the upsert), whether each order is stored and live (finished_at NULL), by key as read_batch reads orders;
-- `counted` appends per tenant live_orders += (live after) - (live before), and unstarted_plans -1 per order
-- inserted that has a plan row.
WITH prior AS (
    SELECT r->>1 AS tenant_id, r->>0 AS order_id, (r->>12)::bool AS finished, o.live
    FROM jsonb_array_elements($1::jsonb) AS r
    LEFT JOIN LATERAL (SELECT finished_at IS NULL AS live FROM orders
                       WHERE tenant_id = r->>1 AND order_id = r->>0 LIMIT 1) AS o ON true
), counted AS (
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, quota, sum(n)
    FROM (SELECT p.tenant_id, 'live_orders' AS quota, (NOT p.finished)::int - coalesce(p.live::int, 0) AS n
          FROM prior AS p
          UNION ALL
          SELECT p.tenant_id, 'unstarted_plans', -1
          FROM prior AS p
          CROSS JOIN LATERAL (SELECT 1 FROM plans
                              WHERE tenant_id = p.tenant_id AND order_id = p.order_id LIMIT 1) AS pl
          WHERE p.live IS NULL) AS d
    GROUP BY tenant_id, quota
    HAVING sum(n) <> 0
), upserted AS (
    INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process,
                        process_version, facts, superseded_plans, deadline_at, finished_at)
    SELECT r->>0, r->>1, r->>2, r->>3, (r->>4)::int, (r->>5)::bool, (r->>6)::int, r->>7, (r->>8)::int,
           (r->>9)::jsonb, string_to_array(r->>10, chr(31)), (r->>11)::timestamptz,
           CASE WHEN (r->>12)::bool THEN now() END
    FROM jsonb_array_elements($1::jsonb) AS r
    ON CONFLICT (tenant_id, order_id) DO UPDATE SET
        plan_id = EXCLUDED.plan_id,
        status = EXCLUDED.status,
        last_seq = EXCLUDED.last_seq,
        tombstone = EXCLUDED.tombstone,
        outbox_count = EXCLUDED.outbox_count,
        process = EXCLUDED.process,
        process_version = EXCLUDED.process_version,
        facts = EXCLUDED.facts,
        superseded_plans = EXCLUDED.superseded_plans,
        deadline_at = EXCLUDED.deadline_at,
        finished_at = CASE WHEN EXCLUDED.finished_at IS NOT NULL THEN coalesce(orders.finished_at, now()) END,
        updated_at = now()
    RETURNING 1
), outboxed AS (
    INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload, traceparent,
                        tenant_id)
    SELECT (r->>0)::uuid, r->>1, (r->>2)::int, (r->>3)::uuid, r->>4, (r->>5)::int, r->>6, (r->>7)::jsonb, r->>8,
           r->>9
    FROM jsonb_array_elements($2::jsonb) AS r
    RETURNING id, tenant_id, order_id, position, event_type
), delivered AS (
    INSERT INTO deliveries (outbox_id, subscription_id, tenant_id, order_id, position, head)
    SELECT o.id, s.id, o.tenant_id, o.order_id, o.position,
           o.position = min(o.position) OVER (PARTITION BY s.id, o.tenant_id, o.order_id)
           AND (SELECT p.position FROM deliveries AS p
                WHERE p.subscription_id = s.id AND p.tenant_id = o.tenant_id AND p.order_id = o.order_id
                  AND p.state = 'pending'
                LIMIT 1) IS NULL
    FROM outboxed AS o
    JOIN subscriptions AS s ON s.enabled AND (s.event_types IS NULL OR o.event_type = ANY (s.event_types))
        AND (s.tenant_id IS NULL OR s.tenant_id = o.tenant_id)
    RETURNING 1
), logged AS (
    INSERT INTO decision_log (tenant_id, order_id, position, at, actor, event_id, plan_id, seq, event_type,
                              decision, code, "check", message, prev_hash, hash, actor_name)
    SELECT r->>0, r->>1, (r->>2)::int, $4::timestamptz, r->>3, r->>4, r->>5, (r->>6)::int, r->>7, r->>8, r->>9,
           r->>10, r->>11, decode(r->>12, 'hex'), decode(r->>13, 'hex'), r->>14
    FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS u(r, n)
    ORDER BY n
    RETURNING 1
), decided AS (
    INSERT INTO decisions_outbox (tenant_id, order_id, value, traceparent)
    SELECT r->>0, r->>1, (r->>2)::jsonb, r->>3
    FROM jsonb_array_elements($7::jsonb) WITH ORDINALITY AS u(r, n)
    ORDER BY n
    RETURNING 1
), numbered AS (
    INSERT INTO plan_steps (tenant_id, order_id, event_id, seq_id, keyed, digest, decision, code, "check", message,
                            decided_at)
    SELECT r->>0, r->>1, (r->>2)::uuid, (r->>3)::int, (r->>4)::bool, r->>5, r->>6, r->>7, r->>8, r->>9,
           (r->>10)::timestamptz
    FROM jsonb_array_elements($8::jsonb) AS r
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM outboxed) THEN pg_notify('nexus_outbox', '') END AS notified,
       (SELECT count(*) FROM upserted) + (SELECT count(*) FROM delivered) + (SELECT count(*) FROM logged)
           + (SELECT count(*) FROM decided) + (SELECT count(*) FROM numbered) AS rows,
       (SELECT count(pg_notify('nexus_orders', json_build_object('tenant', t, 'order_id', o)::text))
        FROM unnest($5::text[], $6::text[]) AS w(t, o)) AS woken;