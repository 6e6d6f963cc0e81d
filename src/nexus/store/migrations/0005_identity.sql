-- Identity and tenancy: API keys with roles, and every order-scoped row keyed by
-- (tenant_id, order_id) so two tenants may use the same order id without touching each other.

CREATE TABLE api_keys (
    id          bigserial PRIMARY KEY,
    name        text,
    -- NULL: every tenant (operators and admins only; enforced by nexus.auth.keys)
    tenant_id   text,
    roles       text[] NOT NULL
                CHECK (cardinality(roles) > 0 AND roles <@ ARRAY['agent', 'operator', 'approver', 'admin']),
    -- SHA-256 of the key: the key itself is shown once and never stored
    key_hash    bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

ALTER TABLE orders DROP CONSTRAINT orders_pkey;
ALTER TABLE orders ADD PRIMARY KEY (tenant_id, order_id);

ALTER TABLE pending_events ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE pending_events DROP CONSTRAINT pending_events_pkey;
ALTER TABLE pending_events ADD PRIMARY KEY (tenant_id, order_id, seq_id);
ALTER TABLE pending_events DROP CONSTRAINT pending_events_event_id_key;
ALTER TABLE pending_events ADD UNIQUE (tenant_id, event_id);

ALTER TABLE outbox ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE outbox DROP CONSTRAINT outbox_order_id_position_key;
ALTER TABLE outbox DROP CONSTRAINT outbox_order_id_seq_id_key;
ALTER TABLE outbox DROP CONSTRAINT outbox_event_id_key;
ALTER TABLE outbox ADD UNIQUE (tenant_id, order_id, position);
ALTER TABLE outbox ADD UNIQUE (tenant_id, order_id, seq_id);
ALTER TABLE outbox ADD UNIQUE (tenant_id, event_id);

ALTER TABLE deliveries ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
DROP INDEX deliveries_pending;
CREATE INDEX deliveries_pending ON deliveries (subscription_id, tenant_id, order_id, position) WHERE state = 'pending';

ALTER TABLE dead_letters ADD COLUMN tenant_id text;
CREATE INDEX dead_letters_tenant ON dead_letters (tenant_id, id);

-- NULL tenant: an operator's subscription spanning every tenant.
ALTER TABLE subscriptions ADD COLUMN tenant_id text;
ALTER TABLE subscriptions ADD COLUMN format text NOT NULL DEFAULT 'native'
    CHECK (format IN ('native', 'cloudevents'));
