-- The orders' insert trigger in one pass over the inserted orders, without a SQL function call per order
-- (benchmarks/RESULTS.md, "Round 16: gateway CPU per event against the base").
--
-- Migration 0028's statement trigger ran two statements over the transition table (the counts, then the orders
-- inserted finished) and picked the finished ones with `nexus_order_finished(...)` on each row. That function
-- holds a sub-select, so PostgreSQL cannot inline it: every inserted order ran it as a call of its own (its own
-- executor for the catalog look-up), about half of the trigger's time in a group commit inserting a few orders.
-- Now one statement reads each inserted order once, with its plan row and its process's terminal states joined
-- by their keys (at most one of each), and both counts and the finished orders come from that reading. What is
-- counted is unchanged: live_orders +1 per inserted order and unstarted_plans -1 per one that had a plan row,
-- per tenant; finished when tombstoned, aborted, or in its process's terminal states (`completed` when the
-- process is unknown), those getting finished_at by their key.

CREATE OR REPLACE FUNCTION nexus_usage_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finished_tenants text[];
    finished_orders text[];
BEGIN
    WITH inserted AS (
        SELECT n.tenant_id, n.order_id, pl.order_id IS NOT NULL AS planned,
               n.tombstone OR n.status = 'aborted' OR n.status = ANY(coalesce(pr.terminal, ARRAY['completed'])) AS done
        FROM new_rows AS n
        LEFT JOIN plans AS pl ON pl.tenant_id = n.tenant_id AND pl.order_id = n.order_id
        LEFT JOIN processes AS pr ON pr.name = n.process AND pr.version = n.process_version
    ), counted AS (
        INSERT INTO tenant_usage (tenant_id, quota, used)
        SELECT c.tenant_id, q.quota, q.used
        FROM (SELECT tenant_id, count(*) AS live, count(*) FILTER (WHERE planned) AS planned
              FROM inserted GROUP BY tenant_id) AS c
        CROSS JOIN LATERAL (VALUES ('live_orders', c.live), ('unstarted_plans', -c.planned)) AS q(quota, used)
        WHERE q.quota = 'live_orders' OR q.used <> 0
    )
    SELECT array_agg(tenant_id), array_agg(order_id) INTO finished_tenants, finished_orders FROM inserted WHERE done;
    IF finished_orders IS NOT NULL THEN  -- seldom (a one-step process's order, one inserted aborted): by key
        UPDATE orders SET finished_at = now()
        WHERE (tenant_id, order_id) IN (SELECT * FROM unnest(finished_tenants, finished_orders)) AND finished_at IS NULL;
    END IF;
    RETURN NULL;
END $$;
