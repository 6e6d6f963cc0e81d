-- Retention (docs/retention.md): finished orders leave NEXUS_RETENTION_S after they finished, a marker per
-- removed order remembers them for NEXUS_REMOVED_ORDER_MEMORY_S. Batched deletes, no partitions: the tables
-- most written and most removed from vacuum and analyse at 2 % of their rows rather than 20 %, so the space a
-- batch frees is found again before the tables grow.

ALTER TABLE tenant_limits ADD COLUMN retention_s integer CHECK (retention_s > 0);

-- The remover's scan: finished orders by when they last changed (their finishing step: a finished order
-- is not written again). An index on a column every step changes costs orders' updates their HOT path
-- (docs/retention.md, "Physical layout").
CREATE INDEX orders_updated_at ON orders (updated_at);
-- Removing an order's rows by (tenant, order) where no index led there yet.
CREATE INDEX approvals_order ON approvals (tenant_id, order_id);
CREATE INDEX dead_letters_order ON dead_letters (order_id) WHERE order_id IS NOT NULL;

CREATE TABLE removed_orders (
    tenant_id      text NOT NULL,
    order_id       text NOT NULL,
    plan_id        text NOT NULL,
    process        text NOT NULL,
    final_status   text NOT NULL,
    tombstone      boolean NOT NULL,
    last_seq       integer NOT NULL,
    notifications  integer NOT NULL,          -- the order's outbox_count: notifications created
    -- every delivery of its notifications at removal: 'delivered' (all), 'dead' (none pending, some dead),
    -- 'none' (no delivery), 'open' (one still pending: only a broken remover leaves it)
    delivery_state text NOT NULL CHECK (delivery_state IN ('delivered', 'dead', 'none', 'open')),
    delivered      integer NOT NULL,
    dead           integer NOT NULL,
    pending        integer NOT NULL,
    finished_at    timestamptz NOT NULL,
    removed_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, order_id)
);
CREATE INDEX removed_orders_removed_at ON removed_orders (removed_at);

ALTER TABLE orders SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE deliveries SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE plan_steps SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE plans SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE delivery_attempts SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE removed_orders SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
