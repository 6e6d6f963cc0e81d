-- Dead letters leave once older than their tenant's retention period unless an order row still names them
-- (retention.sql stray_dead_letters, docs/retention.md). Each tenant's oldest dead letters are read through
-- this index up to that tenant's own cutoff, and the tenants holding dead letters are stepped through it one
-- probe each (nexus_dead_letter_tenants), as 0030/0034 do for finished orders. A dead letter of no known
-- tenant (tenant_id NULL: refused before its key was known) is found by the same index's NULL entries.
-- It replaces dead_letters_created_at (0001), which nothing else reads: with it the planner read every tenant's
-- dead letters past the shortest cutoff and filtered them by tenant (as 0030 found for orders_finished_at).
CREATE INDEX dead_letters_tenant_created_at ON dead_letters (tenant_id, created_at);
DROP INDEX dead_letters_created_at;

CREATE FUNCTION nexus_dead_letter_tenants() RETURNS SETOF text LANGUAGE sql STABLE AS $$
    WITH RECURSIVE tenants (tenant_id) AS (
        (SELECT d.tenant_id FROM dead_letters AS d WHERE d.tenant_id IS NOT NULL ORDER BY d.tenant_id LIMIT 1)
        UNION ALL
        SELECT (SELECT d.tenant_id FROM dead_letters AS d
                WHERE d.tenant_id > t.tenant_id ORDER BY d.tenant_id LIMIT 1)
        FROM tenants AS t WHERE t.tenant_id IS NOT NULL
    )
    SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL
$$;
