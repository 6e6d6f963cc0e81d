-- issue 13: plan lifecycle (plan swap, deadlines, approvals, decisions outbox).

-- Plans a REPLAN replaced for the order: their later steps are DISCARD PLAN_SUPERSEDED, not dead letters.
ALTER TABLE orders ADD COLUMN superseded_plans text[] NOT NULL DEFAULT '{}';
