-- Orders, the reordering buffer, the outbox and dead letters: the gateway's source of truth.

CREATE TABLE orders (
    order_id    text PRIMARY KEY,
    tenant_id   text NOT NULL DEFAULT 'default',
    plan_id     text NOT NULL,
    status      text NOT NULL CHECK (status IN ('created', 'inventory_validated', 'payment_processed',
                                                 'shipped', 'completed', 'aborted')),
    last_seq    integer NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    -- an order whose ABORT_PLAN arrived before any step: it exists only to discard later steps
    tombstone   boolean NOT NULL DEFAULT false,
    outbox_count integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX orders_plan_id ON orders (plan_id);

-- Steps that arrived ahead of a gap; applied, in seq order, when the gap fills.
CREATE TABLE pending_events (
    order_id    text NOT NULL,
    seq_id      integer NOT NULL,
    event_id    uuid NOT NULL UNIQUE,
    plan_id     text NOT NULL,
    envelope    jsonb NOT NULL,
    traceparent text,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, seq_id)
);
CREATE INDEX pending_events_received_at ON pending_events (received_at);

-- One row per applied step: the notification to tell the world. The unique keys make a second
-- application of the same step impossible, whatever the code above them does.
CREATE TABLE outbox (
    id          uuid PRIMARY KEY,
    order_id    text NOT NULL,
    position    integer NOT NULL CHECK (position >= 1),
    event_id    uuid NOT NULL UNIQUE,
    event_type  text NOT NULL,
    seq_id      integer,
    plan_id     text NOT NULL,
    payload     jsonb NOT NULL,
    traceparent text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (order_id, position),
    UNIQUE (order_id, seq_id)
);

CREATE TABLE dead_letters (
    id          bigserial PRIMARY KEY,
    source      text NOT NULL CHECK (source IN ('http', 'kafka', 'buffer')),
    code        text NOT NULL,
    error       text NOT NULL,
    event_id    text,
    order_id    text,
    plan_id     text,
    payload     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    redriven_at timestamptz
);
CREATE INDEX dead_letters_created_at ON dead_letters (created_at);
