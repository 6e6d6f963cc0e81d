-- The orders' insert trigger without a scan of every order (benchmarks/RESULTS.md, "Round 14: gateway and
-- PostgreSQL CPU per event").
--
-- Migration 0027's statement trigger on orders' inserts set finished_at of the orders inserted finished by
-- `UPDATE orders ... FROM new_rows`: run for every group commit's upsert, its plan (cached per backend,
-- chosen while orders was small) scanned every order, so each batch cost PostgreSQL time in proportion to the
-- table (under wrk: most of PostgreSQL's time, and 40 tuples read per event where the base read 5). Now the
-- orders inserted finished (only a one-step process's, or one inserted aborted) are picked from the
-- transition table first, and only when there are some are they updated, by their primary key.
--
-- Orders' fillfactor leaves room on each page for the four updates that follow an order's insert, so more of
-- them are HOT (no new index entries): new pages only, nothing is rewritten.

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
    FROM new_rows n WHERE nexus_order_finished(n.process, n.process_version, n.status, n.tombstone);
    IF finished_orders IS NOT NULL THEN
        UPDATE orders o SET finished_at = now()
        FROM unnest(finished_tenants, finished_orders) AS f(tenant_id, order_id)
        WHERE o.tenant_id = f.tenant_id AND o.order_id = f.order_id AND o.finished_at IS NULL;
    END IF;
    RETURN NULL;
END $$;

ALTER TABLE orders SET (fillfactor = 70);
