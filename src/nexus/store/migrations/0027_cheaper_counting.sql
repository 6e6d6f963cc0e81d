-- Cheaper quota counting and orders' HOT updates back (benchmarks/RESULTS.md, "Round 13: the hot path's
-- cost of quotas and retention").
--
-- Every step upserts its order and changes updated_at. Migration 0023's statement-level UPDATE trigger on
-- orders built old and new transition tables of every updated order on every step and looked the process
-- catalog up twice for each status change, to count the few updates that finish an order; migration
-- 0024's index on updated_at took every such update off PostgreSQL's HOT path (an index entry per step).
--
-- Instead an order records when it finished: `finished_at`, set by a BEFORE trigger when its status or
-- tombstone changes (the only columns that can finish it) into a finished state, or by the insert's
-- statement trigger for an order inserted finished; the live-orders count changes by a row-level trigger
-- that fires only when `finished_at` turns non-NULL (or back). Retention scans the partial index
-- `orders_finished_at` (finished orders only; written once per order, so steps keep their HOT updates),
-- which replaces orders_updated_at.

ALTER TABLE orders ADD COLUMN finished_at timestamptz;

-- Orders finished before this migration finished at their last change (what retention read until now).
UPDATE orders SET finished_at = updated_at
WHERE nexus_order_finished(process, process_version, status, tombstone);

-- Whether the order in NEW is finished (as nexus_order_finished, with the catalog read by a cached plan).
CREATE FUNCTION nexus_order_set_finished_at() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finished boolean := NEW.tombstone OR NEW.status = 'aborted';
BEGIN
    IF NOT finished THEN
        SELECT NEW.status = ANY(coalesce(p.terminal, ARRAY['completed'])) INTO finished
        FROM processes p WHERE p.name = NEW.process AND p.version = NEW.process_version;
        finished := coalesce(finished, NEW.status = 'completed');
    END IF;
    NEW.finished_at := CASE WHEN finished THEN coalesce(OLD.finished_at, now()) END;
    RETURN NEW;
END $$;

-- Only when a step changes what can finish an order (an order inserted finished is set by the insert's
-- statement trigger below: a BEFORE INSERT trigger would run for every step, each an upsert).
CREATE TRIGGER orders_finished_at_update BEFORE UPDATE ON orders
    FOR EACH ROW WHEN ((OLD.status, OLD.tombstone) IS DISTINCT FROM (NEW.status, NEW.tombstone))
    EXECUTE FUNCTION nexus_order_set_finished_at();

CREATE INDEX orders_finished_at ON orders (finished_at) WHERE finished_at IS NOT NULL;
DROP INDEX orders_updated_at;

-- live_orders: every order inserted counts as live (statement-level: one delta per batch); those inserted
-- finished (a one-step process) get finished_at here, which counts them out again by the row-level trigger
-- on their finishing; one removed unfinished leaves the count.
CREATE OR REPLACE FUNCTION nexus_usage_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'live_orders', count(*) FROM new_rows GROUP BY tenant_id
    UNION ALL
    SELECT n.tenant_id, 'unstarted_plans', -count(*) FROM new_rows n
    JOIN plans p ON p.tenant_id = n.tenant_id AND p.order_id = n.order_id GROUP BY n.tenant_id;
    UPDATE orders o SET finished_at = now() FROM new_rows n
    WHERE o.tenant_id = n.tenant_id AND o.order_id = n.order_id AND o.finished_at IS NULL
      AND nexus_order_finished(n.process, n.process_version, n.status, n.tombstone);
    RETURN NULL;
END $$;

DROP TRIGGER orders_usage_update ON orders;
DROP FUNCTION nexus_usage_orders_update();

CREATE FUNCTION nexus_usage_orders_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    VALUES (NEW.tenant_id, 'live_orders', CASE WHEN NEW.finished_at IS NULL THEN 1 ELSE -1 END);
    RETURN NULL;
END $$;

CREATE TRIGGER orders_usage_finished AFTER UPDATE ON orders
    FOR EACH ROW WHEN ((OLD.finished_at IS NULL) <> (NEW.finished_at IS NULL))
    EXECUTE FUNCTION nexus_usage_orders_finished();

CREATE OR REPLACE FUNCTION nexus_usage_orders_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'live_orders', -count(*) FROM old_rows WHERE finished_at IS NULL GROUP BY tenant_id
    UNION ALL
    SELECT o.tenant_id, 'unstarted_plans', count(*) FROM old_rows o
    JOIN plans p ON p.tenant_id = o.tenant_id AND p.order_id = o.order_id GROUP BY o.tenant_id;
    RETURN NULL;
END $$;
