-- Every webhook delivery attempt, for the console's order page: `deliveries` keeps only the
-- last answer. Written by the dispatcher's outcome batch in the same transaction as the attempts'
-- outcomes (one INSERT per batch, `record_attempts` in delivery.sql); pruned past
-- NEXUS_DELIVERY_ATTEMPTS_RETENTION_S (`prune_attempts`). No foreign key: the history outlives nothing it
-- points at (outbox rows and deliveries are never deleted) and a key check per row would tax the hot path.
-- `outcome` is core/delivery.py's AttemptOutcome (the CHECK keeps SQL and Python from drifting apart).

CREATE TABLE delivery_attempts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id       uuid NOT NULL,                   -- the notification
    subscription_id bigint NOT NULL,
    tenant_id       text NOT NULL,
    order_id        text NOT NULL,
    attempt         integer NOT NULL,                -- X-Delivery-Attempt of the request, from 1
    at              timestamptz NOT NULL,            -- when the request was sent
    outcome         text NOT NULL CHECK (outcome IN ('delivered', 'retryable', 'rejected', 'unsendable')),
    status          integer,                         -- the subscriber's HTTP status, when it answered
    error_class     text,                            -- otherwise what went wrong (timeout, ConnectError, ...)
    duration_ms     real                             -- NULL when no request was sent
);
CREATE INDEX delivery_attempts_order ON delivery_attempts (tenant_id, order_id, outbox_id);
CREATE INDEX delivery_attempts_at ON delivery_attempts (at);
