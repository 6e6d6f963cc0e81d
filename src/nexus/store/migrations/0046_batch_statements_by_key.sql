-- The group commit's read and write of its orders (gateway.sql `read_batch`, `write_batch`; and `delete_pending`,
-- `read_buffered`, below) as functions planned for reads by key only, whatever the tables' statistics say (benchmarks/RESULTS.md, "Round 26";
-- tests/integration/test_read_batch_plans.py).
--
-- The statement joins the batch's keys to the orders' side tables (buffered, rejected and held steps, removal
-- markers, plans, numbered steps, the decision log's heads). A prepared statement keeps its generic plan, made
-- from the statistics of the time: planned while those tables were small (a few hundred rows, analyzed), it
-- hash-joins or scans them, and a tenant's legal load (steps buffered, rejected or held by the thousand) can grow
-- them a hundredfold before autovacuum analyzes them again (at 10 % changed rows, once a naptime). Measured:
-- planned at 100 rows a table, grown to 20,100 without an ANALYZE, one read of 16 orders took 32-63 ms instead of
-- about 0.6 ms, for every tenant's group commit; a lateral look-up per key alone did not help (its inner scan is
-- chosen by the same statistics: 170 ms).
--
-- Run by a PL/pgSQL function whose SET clauses turn sequential scans, hash joins and merge joins off while it
-- plans and runs, the read is planned as what it is (a nested loop over at most a batch of keys, each an index
-- look-up) for a table of any size: 0.64-0.77 ms in the same case; 0.58-0.60 ms at 100 rows analyzed (the plain
-- statement 0.66-0.68), and about 50 us slower than the plain statement's plan once the statistics are fresh at
-- 20,100 rows (the function's call). Every table read here has an index leading with (tenant_id, order_id). The body is gateway.sql's
-- statement as it was, its parameters $1-$7 the same; its documentation:
-- Everything `Gateway.submit` reads of a batch's orders after `lock_orders`, in one statement: their
-- rows ('order'), buffered steps ('pending'), rejected steps ('rejected'), the tenants' limits ('limit',
-- only when $4; max_list_items NULL when the tenant has none of its own), the steps held for approval
-- ('held': event_id and plan_id, only when $4), the removal markers of removed orders ('removed': used when
-- the order has no row, nexus.retention), the decision log's chain heads ('head', nexus_chain_heads), and for the
-- server-numbered steps of the orders $5/$6 (those with proposals or plan ends; empty: none) their started plans
-- ('plan'), the stored first verdicts of the event ids $7 ('known') and each one's last applied numbered step
-- ('last'). $1/$2 the (tenant, order) pairs, $3 the tenants. Columns a kind does not use are NULL. A buffered
-- step's `numbered`: the server numbered it (it has a first verdict in plan_steps), so a refused predecessor
-- settles it. An order's `live`: its finished_at is NULL (what write_batch counts its write against).
-- Each order is read by its key (a lateral look-up, LIMIT 1 on the primary key): a join the planner may turn into
-- a hash join over every order when its statistics still say the table is small (a busy new table between two
-- autoanalyze runs), the plan then kept by the prepared statement while orders grows.
CREATE FUNCTION nexus_read_batch(
    key_tenants text[], key_orders text[], tenants text[], validated bool, numbered_tenants text[],
    numbered_orders text[], event_ids uuid[]
)
RETURNS TABLE ("kind" text, "tenant_id" text, "order_id" text, "plan_id" text, "status" text, "last_seq" int,
    "tombstone" bool, "outbox_count" int, "process" text, "process_version" int, "facts" text, "seq_id" int,
    "envelope" text, "event_id" uuid, "code" text, "check_id" text, "message" text, "max_order_amount" text,
    "max_list_items" int, "position" int, "hash" bytea, "superseded_plans" text[], "deadline_at" timestamptz,
    "numbered" bool, "digest" text, "decision" text, "decided_at" timestamptz, "live" bool)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT 'order' AS kind, o.tenant_id, o.order_id, o.plan_id, o.status, o.last_seq, o.tombstone, o.outbox_count,
           o.process, o.process_version, o.facts::text AS facts, NULL::int AS seq_id, NULL::text AS envelope,
           NULL::uuid AS event_id, NULL::text AS code, NULL::text AS check_id, NULL::text AS message,
           NULL::text AS max_order_amount, NULL::int AS max_list_items, NULL::int AS position, NULL::bytea AS hash,
           o.superseded_plans, o.deadline_at, NULL::bool AS numbered, NULL::text AS digest, NULL::text AS decision,
           NULL::timestamptz AS decided_at,
           o.finished_at IS NULL AS live
    FROM unnest($1::text[], $2::text[]) AS u(t, oid)
    CROSS JOIN LATERAL (SELECT * FROM orders WHERE tenant_id = u.t AND order_id = u.oid LIMIT 1) AS o
    UNION ALL
    SELECT 'pending', p.tenant_id, p.order_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, p.seq_id,
           p.envelope::text, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           EXISTS (SELECT 1 FROM plan_steps AS s
                   WHERE s.tenant_id = p.tenant_id AND s.order_id = p.order_id AND s.event_id = p.event_id),
           NULL, NULL, NULL, NULL
    FROM pending_events AS p
    JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON p.tenant_id = u.t AND p.order_id = u.oid
    UNION ALL
    SELECT 'rejected', r.tenant_id, r.order_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           r.event_id, r.code, r.check_id, r.message, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM rejected_events AS r
    JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON r.tenant_id = u.t AND r.order_id = u.oid
    WHERE $4::bool
    UNION ALL
    SELECT 'limit', tenant_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, max_order_amount::text, max_list_items, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM tenant_limits WHERE $4::bool AND tenant_id = ANY($3::text[])
    UNION ALL
    SELECT 'held', a.tenant_id, a.order_id, a.plan_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           a.event_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM approvals AS a
    JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON a.tenant_id = u.t AND a.order_id = u.oid
    WHERE $4::bool AND a.status = 'pending'
    UNION ALL
    SELECT 'removed', m.tenant_id, m.order_id, m.plan_id, m.final_status, m.last_seq, m.tombstone, m.notifications,
           m.process, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL
    FROM removed_orders AS m
    JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON m.tenant_id = u.t AND m.order_id = u.oid
    UNION ALL
    SELECT 'head', h.tenant_id, h.order_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, h.position, h.hash, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM nexus_chain_heads($1::text[], $2::text[]) AS h
    UNION ALL
    SELECT 'plan', pl.tenant_id, pl.order_id, pl.plan_id, NULL, NULL, NULL, NULL, pl.process, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, pl.deadline_at, NULL, NULL, NULL, NULL, NULL
    FROM plans AS pl
    JOIN unnest($5::text[], $6::text[]) AS u(t, oid) ON pl.tenant_id = u.t AND pl.order_id = u.oid
    UNION ALL
    SELECT 'known', s.tenant_id, s.order_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, s.seq_id, NULL,
           s.event_id, s.code, s."check", s.message, NULL, NULL, NULL, NULL, NULL, NULL, NULL, s.digest, s.decision,
           s.decided_at, NULL
    FROM plan_steps AS s
    JOIN unnest($5::text[], $6::text[]) AS u(t, oid) ON s.tenant_id = u.t AND s.order_id = u.oid
    WHERE s.event_id = ANY($7::uuid[])
    UNION ALL
    SELECT 'last', l.tenant_id, l.order_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, l.seq_id, NULL,
           l.event_id, l.code, l."check", l.message, NULL, NULL, NULL, NULL, NULL, NULL, NULL, l.digest, l.decision,
           l.decided_at, NULL
    FROM unnest($5::text[], $6::text[]) AS k(t, oid)
    CROSS JOIN LATERAL (
        SELECT * FROM plan_steps AS s
        WHERE s.tenant_id = k.t AND s.order_id = k.oid AND s.decision = 'APPLY'
        ORDER BY s.seq_id DESC LIMIT 1
    ) AS l;
END $$;

-- The group commit's write (gateway.sql `write_batch`) alike: it reads too, each inserted order's plan row (a
-- lateral LIMIT 1 on plans, for unstarted_plans) and, per notification and subscription, whether a delivery of
-- the pair is pending (deliveries); planned at a hundred plans analyzed and grown to 20,100, each inserted order
-- scanned every plan. Its body is gateway.sql's statement as it was, parameters $1-$12 the same, with one change:
-- the outbox's wake-up is counted (`notified`, 0 or 1) rather than returned as the void of pg_notify, which a
-- function's result cannot hold. Its documentation:
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
-- The orders' counts (migration 0045, no trigger on orders): live_orders deltas per tenant ($9/$10, from what
-- read_batch read of each order under its lock: (live after) - (live before); a tenant whose count is unchanged is
-- not passed), and unstarted_plans -1 per order inserted ($11/$12) that has a plan row (one row each: a plan
-- started by POST /v1/plans; an order started by its first step has none), looked up by key (a lateral LIMIT 1, as
-- read_batch reads orders: never a hash join over every plan).
CREATE FUNCTION nexus_write_batch(
    order_rows jsonb, notification_rows jsonb, record_rows jsonb, recorded_at timestamptz, wake_tenants text[],
    wake_orders text[], decision_rows jsonb, verdict_rows jsonb, live_tenants text[], live_deltas int[],
    inserted_tenants text[], inserted_orders text[]
)
RETURNS TABLE (notified bigint, written bigint, woken bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH counted AS (
        INSERT INTO tenant_usage (tenant_id, quota, used)
        SELECT t, 'live_orders', n FROM unnest($9::text[], $10::int[]) AS c(t, n)
        UNION ALL
        SELECT k.t, 'unstarted_plans', -1
        FROM unnest($11::text[], $12::text[]) AS k(t, o)
        CROSS JOIN LATERAL (SELECT FROM plans WHERE tenant_id = k.t AND order_id = k.o LIMIT 1) AS pl
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
    SELECT (SELECT count(pg_notify('nexus_outbox', '')) FROM (SELECT FROM outboxed LIMIT 1) AS x) AS notified,
           (SELECT count(*) FROM upserted) + (SELECT count(*) FROM delivered) + (SELECT count(*) FROM logged)
               + (SELECT count(*) FROM decided) + (SELECT count(*) FROM numbered) AS written,
           (SELECT count(pg_notify('nexus_orders', json_build_object('tenant', t, 'order_id', o)::text))
            FROM unnest($5::text[], $6::text[]) AS w(t, o)) AS woken;
END $$;

-- The buffered steps the group commit applies, deleted by key (gateway.sql `delete_pending`), and the buffered steps
-- of orders the sweeper drains, read by key with their sagas' last steps (gateway.sql `read_buffered`): the same
-- joins of keys to a table a tenant's load grows (pending_events, saga_steps), alike. Their documentation:

CREATE FUNCTION nexus_delete_pending(order_ids text[], seq_ids int[], tenant_ids text[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM pending_events AS p
    USING unnest($1::text[], $2::int[], $3::text[]) AS u(order_id, seq_id, tenant_id)
    WHERE p.tenant_id = u.tenant_id AND p.order_id = u.order_id AND p.seq_id = u.seq_id;
END $$;

-- The buffered steps of orders already locked, oldest first, with the database's clock, each with the saga
-- step before it (its status and times, NULL: none): the core decides since when each waits and which
-- expired (core/decide/expiry.py `waiting_since`).
CREATE FUNCTION nexus_read_buffered(key_tenants text[], key_orders text[])
RETURNS TABLE ("tenant_id" text, "order_id" text, "seq_id" int, "event_id" text, "plan_id" text, "envelope" text,
    "received_at" timestamptz, "effect_status" text, "effect_executed_at" timestamptz,
    "effect_updated_at" timestamptz, "now" timestamptz)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT p.tenant_id, p.order_id, p.seq_id, p.event_id::text AS event_id, p.plan_id, p.envelope::text AS envelope,
           p.received_at, effect.status AS effect_status, effect.executed_at AS effect_executed_at,
           effect.updated_at AS effect_updated_at, now() AS now
    FROM pending_events AS p JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON p.tenant_id = u.t AND p.order_id = u.oid
    LEFT JOIN LATERAL (
        SELECT st.status, st.executed_at, st.updated_at
        FROM saga_steps AS st WHERE st.tenant_id = p.tenant_id AND st.order_id = p.order_id AND st.seq < p.seq_id
        ORDER BY st.seq DESC LIMIT 1
    ) AS effect ON true
    ORDER BY p.received_at, p.tenant_id, p.order_id, p.seq_id;
END $$;
