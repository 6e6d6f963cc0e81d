-- Read-only queries of the chaos runs' MCP agents (nexus_lab.chaos.mcp_agents): what PostgreSQL says about
-- orders whose steps were proposed through /mcp. $1: the order ids (tenant "default").

-- name: numbered_steps
-- The first verdicts of the numbered steps, per order.
SELECT order_id, seq_id, decision FROM plan_steps
WHERE tenant_id = 'default' AND order_id = ANY($1::text[]) ORDER BY order_id, seq_id;

-- name: logged_decisions
-- The decision log's decisions per order and kind.
SELECT order_id, decision, count(*) AS n FROM decision_log
WHERE tenant_id = 'default' AND order_id = ANY($1::text[]) GROUP BY order_id, decision;
