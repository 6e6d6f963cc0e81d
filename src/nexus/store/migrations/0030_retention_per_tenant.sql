-- The remover's scan bounded per tenant (retention.sql due_orders and oldest_finished). The scan of
-- orders_finished_at (0027) started at the shortest period in force and checked each order's own tenant period
-- afterwards: with a tenant period longer than NEXUS_RETENTION_S, every pass read every finished order between
-- the two periods and removed none (8.7 s per pass for 500,000 such orders; see docs/retention.md). With this
-- index the queries step from tenant to tenant (one probe each) and read, per tenant, only the orders finished
-- before that tenant's own cutoff.
--
-- orders_finished_at goes: retention was its only reader, and while it stayed the planner took it for the
-- per-tenant scans too (filtering by tenant, so reading every tenant's orders past the cutoff). Finished orders
-- only: written once per order when it finishes, as before. Built in the migration's transaction: writes to
-- orders wait while it builds (about a second per million rows).
DROP INDEX orders_finished_at;
CREATE INDEX orders_tenant_finished_at ON orders (tenant_id, finished_at) WHERE finished_at IS NOT NULL;
