-- Process definitions: the registry, orders pinned to a (process, version), their facts,
-- remembered rejections and per-tenant limits.

CREATE TABLE processes (
    name         text NOT NULL,
    version      integer NOT NULL CHECK (version >= 1),
    content_hash text NOT NULL,
    body         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- A process names its own states: the order process's list is no longer the only one.
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_check;
ALTER TABLE orders ADD COLUMN process text NOT NULL DEFAULT 'order';
ALTER TABLE orders ADD COLUMN process_version integer NOT NULL DEFAULT 1;
ALTER TABLE orders ADD COLUMN facts jsonb NOT NULL DEFAULT '{}'::jsonb;

-- Every REJECTED step, once: the same event_id sent again is answered from here. Never applied, never
-- notified; the checker proves no rejected event_id reached the outbox.
CREATE TABLE rejected_events (
    event_id   uuid NOT NULL,
    order_id   text NOT NULL,
    plan_id    text NOT NULL,
    tenant_id  text NOT NULL,
    seq_id     integer,
    event_type text NOT NULL,
    code       text NOT NULL,
    check_id   text,
    message    text NOT NULL,
    drained    boolean NOT NULL DEFAULT false,
    envelope   jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- event ids are unique per tenant (migration 0005): two tenants may reuse one
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX rejected_events_order ON rejected_events (tenant_id, order_id);
CREATE INDEX rejected_events_created_at ON rejected_events (created_at);

CREATE TABLE tenant_limits (
    tenant_id        text PRIMARY KEY,
    max_order_amount numeric NOT NULL CHECK (max_order_amount >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
