-- Signed erasure records (core/audit_erasure.py), and the one way past the decision log's append-only trigger.
--
-- The trigger refused every UPDATE, DELETE and TRUNCATE. Removing data on purpose (a tenant erased; later, the
-- retention period's remover) needs a way past it that an ordinary write cannot take by mistake: a transaction
-- that sets `nexus.remover` to `on` (SET LOCAL, inside the remover's own transaction) may DELETE. UPDATE and
-- TRUNCATE stay refused for everyone, and each removal of a chain is covered by a signed record written first.

CREATE OR REPLACE FUNCTION nexus_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('nexus.remover', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TABLE audit_erasures (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL,
    tenant_id   text NOT NULL,
    heads       jsonb NOT NULL,
    digest      bytea NOT NULL UNIQUE CHECK (length(digest) = 32),
    signature   bytea NOT NULL,
    key_id      text NOT NULL,
    public_key  bytea NOT NULL
);

CREATE TRIGGER audit_erasures_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_erasures
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_append_only();
