-- The orders' insert trigger without a SQL function call per inserted order (benchmarks/RESULTS.md, "Round 16:
-- gateway CPU per event against the base").
--
-- Migration 0028's statement trigger picked the orders inserted finished with `nexus_order_finished(...)` on
-- each row of the transition table. That function holds a sub-select, so PostgreSQL cannot inline it: every
-- inserted order ran it as a function call of its own (its own executor for the catalog look-up), about half
-- of the trigger's time in a group commit that inserts a few orders. The same test is now written in the
-- statement, the process's terminal states joined by its key: finished when tombstoned, aborted, or in its
-- process's terminal states (`completed` when the process is unknown), as before.

CREATE OR REPLACE FUNCTION nexus_usage_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finished_tenants text[];
    finished_orders text[];
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'live_orders', count(*) FROM new_rows GROUP BY tenant_id
    UNION ALL
    SELECT n.tenant_id, 'unstarted_plans', -count(*) FROM new_rows n
    JOIN plans p ON p.tenant_id = n.tenant_id AND p.order_id = n.order_id GROUP BY n.tenant_id;
    SELECT array_agg(n.tenant_id), array_agg(n.order_id) INTO finished_tenants, finished_orders
    FROM new_rows n LEFT JOIN processes p ON p.name = n.process AND p.version = n.process_version
    WHERE n.tombstone OR n.status = 'aborted' OR n.status = ANY(coalesce(p.terminal, ARRAY['completed']));
    IF finished_orders IS NOT NULL THEN
        UPDATE orders o SET finished_at = now()
        FROM unnest(finished_tenants, finished_orders) AS f(tenant_id, order_id)
        WHERE o.tenant_id = f.tenant_id AND o.order_id = f.order_id AND o.finished_at IS NULL;
    END IF;
    RETURN NULL;
END $$;
