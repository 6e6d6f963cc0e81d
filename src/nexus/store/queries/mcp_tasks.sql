-- MCP tasks (migration 0026): a HELD step's tools/call answered as a task. Every read is filtered by the
-- caller's tenant, so another tenant's task reads as an unknown one.

-- name: create_task
INSERT INTO mcp_tasks (task_id, tenant_id, order_id, approval_id, created_by, ttl_ms)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING task_id, created_at, ttl_ms;

-- name: task
-- $1 tenant, $2 task_id: the task, its approval, the step's latest decision after it was held (APPLY, or
-- REJECTED APPROVAL_DENIED, or DISCARD when the plan was aborted or replaced) and the order's state now.
SELECT t.task_id, t.created_at, t.ttl_ms, t.approval_id, t.order_id,
       a.status AS approval_status, a.decided_at, a.event_id, a.seq_id, a.event_type,
       d.decision, d.code, d."check", d.message, d.at AS decided_at_log,
       o.status AS order_status, o.last_seq
FROM mcp_tasks AS t
JOIN approvals AS a ON a.approval_id = t.approval_id
LEFT JOIN LATERAL (
    SELECT decision, code, "check", message, at FROM decision_log
    WHERE order_id = t.order_id AND tenant_id = t.tenant_id AND event_id = a.event_id::text
      AND decision NOT IN ('HELD', 'DUPLICATE')
    ORDER BY position DESC LIMIT 1
) AS d ON a.status <> 'pending'
LEFT JOIN orders AS o ON o.tenant_id = t.tenant_id AND o.order_id = t.order_id
WHERE t.tenant_id = $1 AND t.task_id = $2;
