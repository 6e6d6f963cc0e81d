-- The group commit's upsert of orders writes finished_at itself (benchmarks/RESULTS.md, "Round 17, perf17").
--
-- Migration 0027's BEFORE UPDATE trigger `orders_finished_at_update` ran a PL/pgSQL call for every step that
-- changed its order's status (every step of the shipped processes does): 9.4-10.8 ms of PostgreSQL per 1,000
-- events under wrk, the largest cost the base lacks. gateway.sql `write_batch` now computes finished_at in its
-- upsert, joining each row's process by its key (what finishes an order is unchanged: tombstoned, aborted, or a
-- status among its process's terminal states, `completed` when the process or its terminal states are unknown;
-- an order finished keeps its first finished_at), and names its own statement in the transaction-local
-- setting `nexus.orders_stamped` (its statement_timestamp()) before its first row; the trigger skips the rows of
-- that statement only. Every other writer of orders (a later statement, another transaction, a person at psql)
-- still gets finished_at from the trigger, as before.
--
-- An order the upsert inserts finished now carries finished_at from its insert, so the insert's statement
-- trigger counts live only the orders inserted without it (before: +1 for each, then -1 by the row trigger
-- orders_usage_finished when the statement trigger stamped it: the same count). Orders inserted unfinished but
-- done (another writer) are stamped by key as in 0038 (the pairs in one two-dimensional array).

DROP TRIGGER orders_finished_at_update ON orders;
CREATE TRIGGER orders_finished_at_update BEFORE UPDATE ON orders
    FOR EACH ROW WHEN ((OLD.status, OLD.tombstone) IS DISTINCT FROM (NEW.status, NEW.tombstone)
                       AND current_setting('nexus.orders_stamped', true) IS DISTINCT FROM statement_timestamp()::text)
    EXECUTE FUNCTION nexus_order_set_finished_at();

-- One reading of the inserted orders (their plan row and process joined by key, as 0038): the counts (live: the
-- orders inserted without finished_at) and the orders inserted unstamped that are finished.
CREATE OR REPLACE FUNCTION nexus_usage_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unstamped text[][];
BEGIN
    WITH inserted AS (
        SELECT n.tenant_id, n.order_id, pl.order_id IS NOT NULL AS planned, n.finished_at IS NULL AS live,
               n.finished_at IS NULL AND (n.tombstone OR n.status = 'aborted'
                   OR n.status = ANY(coalesce(pr.terminal, ARRAY['completed']))) AS done
        FROM new_rows AS n
        LEFT JOIN plans AS pl ON pl.tenant_id = n.tenant_id AND pl.order_id = n.order_id
        LEFT JOIN processes AS pr ON n.finished_at IS NULL AND pr.name = n.process AND pr.version = n.process_version
    ), counted AS (
        INSERT INTO tenant_usage (tenant_id, quota, used)
        SELECT c.tenant_id, q.quota, q.used
        FROM (SELECT tenant_id, count(*) FILTER (WHERE live) AS live, count(*) FILTER (WHERE planned) AS planned
              FROM inserted GROUP BY tenant_id) AS c
        CROSS JOIN LATERAL (VALUES ('live_orders', c.live), ('unstarted_plans', -c.planned)) AS q(quota, used)
        WHERE q.used <> 0
    )
    SELECT array_agg(ARRAY[tenant_id, order_id]) INTO unstamped FROM inserted WHERE done;
    -- seldom (another writer's order inserted finished): stamped by key, which counts it out of live_orders
    IF unstamped IS NOT NULL THEN
        UPDATE orders SET finished_at = now()
        WHERE finished_at IS NULL
          AND (tenant_id, order_id) IN (SELECT * FROM unnest(unstamped[:][1:1], unstamped[:][2:2]));
    END IF;
    RETURN NULL;
END $$;
