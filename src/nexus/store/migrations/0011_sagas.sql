-- Sagas: the effects of an order's steps, performed by the gateway's executors.
-- One saga per order, keyed like the order; one row per step with an effect, keyed by its seq.
-- Statuses are core/saga.py's enums; the CHECKs keep SQL and Python from drifting apart silently.

CREATE TABLE sagas (
    tenant_id        text NOT NULL,
    order_id         text NOT NULL,
    plan_id          text NOT NULL,
    process          text NOT NULL,
    status           text NOT NULL DEFAULT 'PENDING' CHECK (status IN
                     ('PENDING', 'RUNNING', 'COMPLETED', 'COMPENSATING', 'COMPENSATED', 'FAILED', 'ESCALATED')),
    error            text,
    abort_written    boolean NOT NULL DEFAULT false,
    next_attempt_at  timestamptz,                -- NULL: nothing to do (waiting for the agent's next step)
    lease_until      timestamptz,                -- an executor holds the saga until then (SKIP LOCKED + lease)
    lease_owner      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, order_id)
);
CREATE INDEX sagas_due ON sagas (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX sagas_status ON sagas (status);

CREATE TABLE saga_steps (
    tenant_id             text NOT NULL,
    order_id              text NOT NULL,
    seq                   integer NOT NULL,
    step_name             text NOT NULL,
    plan_id               text NOT NULL,
    event_id              uuid NOT NULL,
    envelope              jsonb NOT NULL,         -- the step, applied for good once its effect succeeds
    status                text NOT NULL DEFAULT 'PENDING' CHECK (status IN
                          ('PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'COMPENSATED')),
    service               text NOT NULL,
    compensable           boolean NOT NULL,
    pivot                 boolean NOT NULL DEFAULT false,
    uncertain             boolean NOT NULL DEFAULT false,
    forward_path          text NOT NULL,
    forward_payload       jsonb,                  -- NULL with forward_error: the body could not be built
    forward_error         text,
    forward_response      jsonb,
    forward_key           text,                   -- HMAC(secret, tenant:order:plan:step:forward), set by the executor
    compensation_path     text,
    compensation_spec     jsonb,                  -- field -> CEL, evaluated with the forward call's result
    compensating_payload  jsonb,
    compensating_response jsonb,
    compensation_key      text,
    attempts              integer NOT NULL DEFAULT 0,
    compensation_attempts integer NOT NULL DEFAULT 0,
    last_error            text,
    traceparent           text,
    executed_at           timestamptz,
    compensated_at        timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, order_id, seq),
    FOREIGN KEY (tenant_id, order_id) REFERENCES sagas (tenant_id, order_id) ON DELETE CASCADE
);
CREATE INDEX saga_steps_forward_key ON saga_steps (forward_key);
