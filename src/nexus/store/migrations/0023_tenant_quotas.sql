-- Quotas on what a tenant stores (nexus.auth.quotas): live orders, unstarted plans, buffered steps, dead
-- letters and active keys, counted in PostgreSQL so every gateway process sees one count.
--
-- Counting rows at each request would scan a tenant's orders; instead statement-level triggers with
-- transition tables append one signed delta per tenant and quota per statement to tenant_usage (an insert,
-- never an update of a shared row: two transactions of one tenant never wait for each other here, and no
-- lock order between tenants can deadlock). A tenant's usage is the sum of its rows; `compact_usage`
-- (nexus.auth.quotas) folds them into one row per tenant and quota under an advisory lock.

-- A tenant's own quotas; NULL: the NEXUS_QUOTA_* default; 0: no quota.
ALTER TABLE tenant_limits ADD COLUMN quota_live_orders bigint CHECK (quota_live_orders >= 0);
ALTER TABLE tenant_limits ADD COLUMN quota_unstarted_plans bigint CHECK (quota_unstarted_plans >= 0);
ALTER TABLE tenant_limits ADD COLUMN quota_buffered_steps bigint CHECK (quota_buffered_steps >= 0);
ALTER TABLE tenant_limits ADD COLUMN quota_dead_letters bigint CHECK (quota_dead_letters >= 0);
ALTER TABLE tenant_limits ADD COLUMN quota_active_keys bigint CHECK (quota_active_keys >= 0);

-- A process's terminal states (an order in one, or tombstoned, is finished: no longer live). Registration
-- sets it for every definition; here it is read from the flow-style `terminal: [a, b]` of the stored body.
ALTER TABLE processes ADD COLUMN terminal text[];
UPDATE processes SET terminal = regexp_split_to_array(
    trim(substring(body FROM 'terminal:[ \t]*\[([^\]]*)\]')), '[ \t]*,[ \t]*')
WHERE body ~ 'terminal:[ \t]*\[';

CREATE TABLE tenant_usage (
    tenant_id text NOT NULL,
    quota     text NOT NULL
              CHECK (quota IN ('live_orders', 'unstarted_plans', 'buffered_steps', 'dead_letters', 'active_keys')),
    used      bigint NOT NULL
);
CREATE INDEX tenant_usage_tenant ON tenant_usage (tenant_id, quota);

-- Whether an order of (process, version) in `status` is finished.
CREATE FUNCTION nexus_order_finished(p_process text, p_version integer, p_status text, p_tombstone boolean)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT p_tombstone OR p_status = 'aborted' OR p_status = ANY(coalesce(
        (SELECT terminal FROM processes WHERE name = p_process AND version = p_version), ARRAY['completed']))
$$;

-- orders: live_orders (not finished) and unstarted_plans (a plan row without an order row)
CREATE FUNCTION nexus_usage_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'live_orders', count(*) FROM new_rows
    WHERE NOT nexus_order_finished(process, process_version, status, tombstone) GROUP BY tenant_id
    UNION ALL
    SELECT n.tenant_id, 'unstarted_plans', -count(*) FROM new_rows n
    JOIN plans p ON p.tenant_id = n.tenant_id AND p.order_id = n.order_id GROUP BY n.tenant_id;
    RETURN NULL;
END $$;

CREATE FUNCTION nexus_usage_orders_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'live_orders', sum(delta) FROM (
        SELECT n.tenant_id,
               (NOT nexus_order_finished(n.process, n.process_version, n.status, n.tombstone))::integer
             - (NOT nexus_order_finished(o.process, o.process_version, o.status, o.tombstone))::integer AS delta
        FROM new_rows n JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.order_id = n.order_id
        WHERE (n.status, n.tombstone) IS DISTINCT FROM (o.status, o.tombstone)
    ) d GROUP BY tenant_id HAVING sum(delta) <> 0;
    RETURN NULL;
END $$;

CREATE FUNCTION nexus_usage_orders_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'live_orders', -count(*) FROM old_rows
    WHERE NOT nexus_order_finished(process, process_version, status, tombstone) GROUP BY tenant_id
    UNION ALL
    SELECT o.tenant_id, 'unstarted_plans', count(*) FROM old_rows o
    JOIN plans p ON p.tenant_id = o.tenant_id AND p.order_id = o.order_id GROUP BY o.tenant_id;
    RETURN NULL;
END $$;

CREATE TRIGGER orders_usage_insert AFTER INSERT ON orders REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_orders_insert();
CREATE TRIGGER orders_usage_update AFTER UPDATE ON orders REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_orders_update();
CREATE TRIGGER orders_usage_delete AFTER DELETE ON orders REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_orders_delete();

-- plans: unstarted_plans
CREATE FUNCTION nexus_usage_plans_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT n.tenant_id, 'unstarted_plans', count(*) FROM new_rows n
    WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.tenant_id = n.tenant_id AND o.order_id = n.order_id)
    GROUP BY n.tenant_id;
    RETURN NULL;
END $$;

CREATE FUNCTION nexus_usage_plans_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT d.tenant_id, 'unstarted_plans', -count(*) FROM old_rows d
    WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.tenant_id = d.tenant_id AND o.order_id = d.order_id)
    GROUP BY d.tenant_id;
    RETURN NULL;
END $$;

CREATE TRIGGER plans_usage_insert AFTER INSERT ON plans REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_plans_insert();
CREATE TRIGGER plans_usage_delete AFTER DELETE ON plans REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_plans_delete();

-- pending_events: buffered_steps; dead_letters: dead_letters (a dead letter of no known tenant is no one's)
CREATE FUNCTION nexus_usage_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, TG_ARGV[0], count(*) FROM new_rows WHERE tenant_id IS NOT NULL GROUP BY tenant_id;
    RETURN NULL;
END $$;

CREATE FUNCTION nexus_usage_count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, TG_ARGV[0], -count(*) FROM old_rows WHERE tenant_id IS NOT NULL GROUP BY tenant_id;
    RETURN NULL;
END $$;

CREATE TRIGGER pending_events_usage_insert AFTER INSERT ON pending_events REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_count_insert('buffered_steps');
CREATE TRIGGER pending_events_usage_delete AFTER DELETE ON pending_events REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_count_delete('buffered_steps');
CREATE TRIGGER dead_letters_usage_insert AFTER INSERT ON dead_letters REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_count_insert('dead_letters');
CREATE TRIGGER dead_letters_usage_delete AFTER DELETE ON dead_letters REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_count_delete('dead_letters');

-- api_keys: active_keys (not revoked, bound to one tenant; keys spanning every tenant are no one's)
CREATE FUNCTION nexus_usage_keys_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'active_keys', count(*) FROM new_rows
    WHERE tenant_id IS NOT NULL AND revoked_at IS NULL GROUP BY tenant_id;
    RETURN NULL;
END $$;

CREATE FUNCTION nexus_usage_keys_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'active_keys', sum(delta) FROM (
        SELECT n.tenant_id, (n.revoked_at IS NULL)::integer - (o.revoked_at IS NULL)::integer AS delta
        FROM new_rows n JOIN old_rows o ON o.id = n.id WHERE n.tenant_id IS NOT NULL
    ) d GROUP BY tenant_id HAVING sum(delta) <> 0;
    RETURN NULL;
END $$;

CREATE FUNCTION nexus_usage_keys_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT tenant_id, 'active_keys', -count(*) FROM old_rows
    WHERE tenant_id IS NOT NULL AND revoked_at IS NULL GROUP BY tenant_id;
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_usage_insert AFTER INSERT ON api_keys REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_keys_insert();
CREATE TRIGGER api_keys_usage_update AFTER UPDATE ON api_keys REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_keys_update();
CREATE TRIGGER api_keys_usage_delete AFTER DELETE ON api_keys REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_usage_keys_delete();

-- What is stored already
INSERT INTO tenant_usage (tenant_id, quota, used)
SELECT tenant_id, 'live_orders', count(*) FROM orders
WHERE NOT nexus_order_finished(process, process_version, status, tombstone) GROUP BY tenant_id
UNION ALL
SELECT p.tenant_id, 'unstarted_plans', count(*) FROM plans p
WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.tenant_id = p.tenant_id AND o.order_id = p.order_id)
GROUP BY p.tenant_id
UNION ALL
SELECT tenant_id, 'buffered_steps', count(*) FROM pending_events GROUP BY tenant_id
UNION ALL
SELECT tenant_id, 'dead_letters', count(*) FROM dead_letters WHERE tenant_id IS NOT NULL GROUP BY tenant_id
UNION ALL
SELECT tenant_id, 'active_keys', count(*) FROM api_keys WHERE tenant_id IS NOT NULL AND revoked_at IS NULL
GROUP BY tenant_id;
