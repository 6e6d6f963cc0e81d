-- Webhook subscriptions, one delivery per (notification, subscription), and a shared circuit breaker.

CREATE TABLE subscriptions (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    url         text NOT NULL,
    secret      text NOT NULL,
    -- NULL: every event type
    event_types text[],
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deliveries (
    outbox_id       uuid NOT NULL REFERENCES outbox (id),
    subscription_id bigint NOT NULL REFERENCES subscriptions (id),
    order_id        text NOT NULL,
    position        integer NOT NULL,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_until     timestamptz,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    dead_at         timestamptz,
    dead_reason     text,
    PRIMARY KEY (outbox_id, subscription_id)
);
-- The dispatcher's hot path: the oldest pending notification of each (order, subscription).
CREATE INDEX deliveries_pending ON deliveries (subscription_id, order_id, position) WHERE state = 'pending';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';

CREATE TABLE circuit_breakers (
    subscription_id bigint PRIMARY KEY REFERENCES subscriptions (id),
    state           text NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open', 'half_open')),
    failure_count   integer NOT NULL DEFAULT 0,
    last_failure_at timestamptz,
    open_until      timestamptz,
    -- the single probe allowed through while half-open, across all dispatcher instances
    probe_owner     text,
    probe_until     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
