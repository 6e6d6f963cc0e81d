-- plan lifecycle (plan swap, deadlines, approvals, decisions outbox).

-- Plans a REPLAN replaced for the order: their later steps are DISCARD PLAN_SUPERSEDED, not dead letters.
ALTER TABLE orders ADD COLUMN superseded_plans text[] NOT NULL DEFAULT '{}';

-- When the live plan is aborted with abort_code timeout (NULL: no deadline, or the order is terminal).
ALTER TABLE orders ADD COLUMN deadline_at timestamptz;
CREATE INDEX orders_deadline_at ON orders (deadline_at) WHERE deadline_at IS NOT NULL;

-- Steps HELD for a person's approval. Keyed by (tenant_id, order_id) like every lifecycle table; at most
-- one pending per order (the held step takes the order's next seq). `decided_by` is who approved or denied.
-- approval_id derives from (tenant_id, event_id) (nexus/store/lifecycle.py).
CREATE TABLE approvals (
    approval_id  uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    order_id     text NOT NULL,
    event_id     uuid NOT NULL,
    plan_id      text NOT NULL,
    seq_id       integer NOT NULL,
    event_type   text NOT NULL,
    envelope     jsonb NOT NULL,
    traceparent  text,
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    decided_at   timestamptz,
    decided_by   text,
    UNIQUE (tenant_id, event_id)
);
CREATE UNIQUE INDEX approvals_one_pending ON approvals (tenant_id, order_id) WHERE status = 'pending';
CREATE INDEX approvals_expiry ON approvals (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;

-- Decisions on Kafka-ingested steps, written in the deciding transaction and relayed to the
-- `nexus.decisions` topic (then deleted): none lost if a process dies between commit and produce.
CREATE TABLE decisions_outbox (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL,
    order_id    text NOT NULL,
    value       jsonb NOT NULL,
    traceparent text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_outbox_order ON decisions_outbox (tenant_id, order_id);
