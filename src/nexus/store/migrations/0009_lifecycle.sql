-- issue 13: plan lifecycle (plan swap, deadlines, approvals, decisions outbox).

-- Plans a REPLAN replaced for the order: their later steps are DISCARD PLAN_SUPERSEDED, not dead letters.
ALTER TABLE orders ADD COLUMN superseded_plans text[] NOT NULL DEFAULT '{}';

-- When the live plan is aborted with abort_code timeout (NULL: no deadline, or the order is terminal).
ALTER TABLE orders ADD COLUMN deadline_at timestamptz;
CREATE INDEX orders_deadline_at ON orders (deadline_at) WHERE deadline_at IS NOT NULL;
