-- API keys. Keys are looked up by their SHA-256; the key itself is never stored.

-- name: insert_key
INSERT INTO api_keys (name, tenant_id, roles, key_hash)
VALUES ($1, $2, $3::text[], $4)
RETURNING id, name, tenant_id, roles, created_at, revoked_at;

-- name: key_by_hash
-- Revoked keys too: a failed authentication says whether the key was unknown or revoked.
SELECT id, name, tenant_id, roles, revoked_at IS NOT NULL AS revoked FROM api_keys WHERE key_hash = $1;

-- name: list_keys
-- $1: a tenant (its own keys only; not the keys spanning every tenant), or NULL for every key.
SELECT id, name, tenant_id, roles, created_at, revoked_at FROM api_keys
WHERE $1::text IS NULL OR tenant_id = $1
ORDER BY id;

-- name: revoke_key
-- $2: the caller's tenant (a key of another tenant, or one spanning every tenant, is not found), or NULL.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)
RETURNING id, name, tenant_id, roles, created_at, revoked_at;

-- name: count_keys
SELECT count(*) FROM api_keys;

-- name: bootstrap_lock
-- Two gateways starting at once on an empty database must not both write an admin key.
SELECT pg_advisory_xact_lock(7233002211);

-- console sessions shared by every process (migration 0012)
-- name: insert_session
INSERT INTO console_sessions (id_hash, key_hash, csrf, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4));

-- name: session_by_id
SELECT key_hash, csrf, expires_at FROM console_sessions WHERE id_hash = $1 AND expires_at > now();

-- name: delete_session
DELETE FROM console_sessions WHERE id_hash = $1;

-- name: delete_expired_sessions
DELETE FROM console_sessions WHERE expires_at <= now();
