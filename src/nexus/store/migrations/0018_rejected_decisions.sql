-- The REJECTED decisions that the blocked-actions report's filters select (audit.sql `blocked` lists them,
-- `blocked_summary` counts them): one WHERE clause for both. A STABLE one-SELECT SQL function is inlined
-- into the calling query, so each still gets its own plan and the partial indexes decision_log_blocked_*.
-- A NULL filter selects everything.
CREATE FUNCTION nexus_rejected_decisions(
    p_tenant_id text, p_order_id text, p_plan_id text, p_code text, p_since timestamptz
) RETURNS SETOF decision_log LANGUAGE sql STABLE AS $$
    SELECT * FROM decision_log
    WHERE decision = 'REJECTED'
      AND (p_tenant_id IS NULL OR tenant_id = p_tenant_id)
      AND (p_order_id IS NULL OR order_id = p_order_id)
      AND (p_plan_id IS NULL OR plan_id = p_plan_id)
      AND (p_code IS NULL OR code = p_code)
      AND (p_since IS NULL OR at >= p_since)
$$;
