-- Server-numbered steps (POST /v1/plans, POST /v1/orders/{order_id}/steps, the MCP tools).

-- A plan started before its first step: the order's id, plan, process and deadline, so a step (or a
-- restarted agent) finds them after any restart. One per order of a tenant.
CREATE TABLE plans (
    tenant_id   text NOT NULL,
    order_id    text NOT NULL,
    plan_id     text NOT NULL,
    process     text NOT NULL,
    deadline_at timestamptz,
    actor       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, order_id)
);

-- The first verdict on each numbered step, by its event id (for a keyed step, uuid5 of tenant, order and
-- key): a repeat answers DUPLICATE with it for as long as the order exists. Its primary key, not a check
-- in the code, makes a second first verdict impossible. The decision log also records every decision,
-- but it can be switched off (bench), is read by chain position, not by event id, and holds no digest
-- of the data for the repeat window.
CREATE TABLE plan_steps (
    tenant_id   text NOT NULL,
    order_id    text NOT NULL,
    event_id    uuid NOT NULL,
    seq_id      integer,
    keyed       boolean NOT NULL,
    digest      text NOT NULL,
    decision    text NOT NULL,
    code        text,
    "check"     text,
    message     text,
    decided_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, order_id, event_id)
);
-- the order's last applied numbered step (the repeat window of unkeyed proposals)
CREATE INDEX plan_steps_applied ON plan_steps (tenant_id, order_id, seq_id DESC) WHERE decision = 'APPLY';
