-- Console sign-in sessions: held in PostgreSQL so that every gateway process knows a
-- session made by any of them (`nexus serve --workers N`, or several gateways behind a balancer), and a
-- restart signs nobody out. The cookie stays an opaque random id; the table holds its SHA-256 (reading
-- the table gives no usable cookie) and the signed-in key's SHA-256 as api_keys holds it (never the key).

CREATE TABLE console_sessions (
    id_hash     bytea PRIMARY KEY,
    key_hash    bytea NOT NULL,
    csrf        text NOT NULL,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
