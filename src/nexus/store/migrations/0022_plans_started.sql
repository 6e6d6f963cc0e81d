-- The deadline sweeper's search for plans started with no step yet past NEXUS_PLAN_START_TIMEOUT_S
-- (lifecycle.sql unstarted_overdue_plans): oldest first.
CREATE INDEX plans_created_at ON plans (created_at);
