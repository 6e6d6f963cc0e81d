-- the decision log. Every decision the gateway takes about a step is one row, written in the
-- transaction of its effects, chained per order (tenant_id, order_id) by hash: see nexus/core/audit_chain.py
-- for the canonical record. Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE.

CREATE TABLE decision_log (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL,
    order_id    text NOT NULL,
    position    integer NOT NULL CHECK (position >= 1),
    at          timestamptz NOT NULL,
    actor       text,
    event_id    text,
    plan_id     text,
    seq         integer,
    event_type  text,
    decision    text NOT NULL,
    code        text,
    "check"     text,
    message     text,
    prev_hash   bytea NOT NULL CHECK (length(prev_hash) = 32),
    hash        bytea NOT NULL CHECK (length(hash) = 32),
    -- the writing transaction: lets a checkpoint find exactly the rows committed since the previous one
    txid        xid8 NOT NULL DEFAULT pg_current_xact_id()
);
-- one record per position of a chain; order_id first: it serves heads, `audit verify --order` and the
-- report's order filter
CREATE UNIQUE INDEX decision_log_chain ON decision_log (order_id, tenant_id, position);
CREATE INDEX decision_log_txid ON decision_log (txid);
-- the blocked-actions report reads only REJECTED rows: partial indexes cost the hot path nothing
CREATE INDEX decision_log_blocked_at ON decision_log (at, id) WHERE decision = 'REJECTED';
CREATE INDEX decision_log_blocked_tenant ON decision_log (tenant_id, at) WHERE decision = 'REJECTED';
CREATE INDEX decision_log_blocked_plan ON decision_log (plan_id, at) WHERE decision = 'REJECTED';
CREATE INDEX decision_log_blocked_code ON decision_log (code, at) WHERE decision = 'REJECTED';

-- Signed commitments to the chain heads changed since the previous checkpoint (nexus/core/audit_chain.py).
CREATE TABLE audit_checkpoints (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL,
    -- the snapshot the heads were read in: the next checkpoint covers what it could not see
    snapshot    pg_snapshot NOT NULL,
    prev_digest bytea NOT NULL CHECK (length(prev_digest) = 32),
    heads       jsonb NOT NULL,
    digest      bytea NOT NULL UNIQUE CHECK (length(digest) = 32),
    signature   bytea NOT NULL,
    key_id      text NOT NULL,
    public_key  bytea NOT NULL
);

CREATE FUNCTION nexus_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- statement-level: refuses even a statement that would touch no row
CREATE TRIGGER decision_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON decision_log
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_append_only();
CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_append_only();
