-- Approvals bound to the exact step, and MCP tasks answering a held step's final verdict.

-- The version of the process that held the step (NULL for approvals held before this migration): with the
-- step's event_id, seq_id and data it is what an approval binds (an answer may `expect` them).
ALTER TABLE approvals ADD COLUMN process_version integer;

-- An MCP tools/call answered as a task (the `io.modelcontextprotocol/tasks` extension): a step HELD for
-- approval, proposed by a client that supports tasks. The task's state is not stored: it is read from the
-- approval and the decision log, so any gateway process answers tasks/get, across restarts, whoever holds
-- the connection. Keyed by task_id; every read is filtered by the caller's tenant.
CREATE TABLE mcp_tasks (
    task_id      uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    order_id     text NOT NULL,
    approval_id  uuid NOT NULL REFERENCES approvals (approval_id) ON DELETE CASCADE,
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    ttl_ms       bigint
);
CREATE INDEX mcp_tasks_approval ON mcp_tasks (approval_id);
