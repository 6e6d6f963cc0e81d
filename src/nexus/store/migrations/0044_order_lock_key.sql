-- The key of an order's advisory lock, defined once. Every writer of an order locks it by this key: the group
-- commit and the plan starts (nexus.store.locked, gateway.sql begin_locked), the other writers (gateway.sql
-- lock_orders), retention's removal (retention.sql lock_removable, only where free). An order is
-- (tenant, order_id) (migration 0005); chr(31) occurs in neither, so the keys of two different pairs differ.
-- The same key as before (a gateway of the previous release, during a rolling upgrade, excludes this one; the
-- test_locked_transaction keys are computed without the function). A one-expression immutable SQL function is
-- inlined by the planner: the statements cost what they did.
CREATE FUNCTION nexus_order_lock(tenant_id text, order_id text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT hashtextextended(tenant_id || chr(31) || order_id, 0) $$;
