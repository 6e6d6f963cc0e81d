-- Statements more than one query needs, as functions: an order's rows of one table removed (retention.sql,
-- once per table) and the decision log's chain heads (audit.sql read_heads, gateway.sql read_batch).

-- The rows of `tbl` (a table with tenant_id and order_id) of the orders tenants[i]/orders[i]; how many went.
-- The name comes from the remover's own list (nexus.retention.remover.REMOVED_TABLES), never from input.
CREATE FUNCTION nexus_delete_order_rows(tbl text, tenants text[], orders text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    removed bigint;
BEGIN
    EXECUTE format('DELETE FROM %I AS r USING unnest($1, $2) AS u(t, oid) '
                   'WHERE r.tenant_id = u.t AND r.order_id = u.oid', tbl)
        USING tenants, orders;
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END $$;

-- The last (position, hash) of each chain tenants[i]/orders[i] (none for a chain without records). A plain
-- SQL function, so the planner inlines it into the statement that reads it (the decision_log index serves).
CREATE FUNCTION nexus_chain_heads(tenants text[], orders text[])
RETURNS TABLE (tenant_id text, order_id text, "position" integer, hash bytea)
LANGUAGE sql STABLE AS $$
    SELECT u.tenant_id, u.order_id, h.position, h.hash
    FROM unnest(tenants, orders) AS u(tenant_id, order_id)
    CROSS JOIN LATERAL (
        SELECT d.position, d.hash FROM decision_log AS d
        WHERE d.order_id = u.order_id AND d.tenant_id = u.tenant_id
        ORDER BY d.position DESC LIMIT 1
    ) AS h
$$;
