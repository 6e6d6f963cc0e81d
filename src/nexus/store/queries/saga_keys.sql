-- The saga calls' Idempotency-Keys and their secret (migration 0019).

-- name: read_secret
SELECT secret FROM nexus_secrets WHERE name = 'saga';

-- name: create_secret
-- Race-free: a second gateway's insert waits for the first's and does nothing; both then read the same row.
INSERT INTO nexus_secrets (name, secret) VALUES ('saga', $1) ON CONFLICT (name) DO NOTHING;

-- name: steps_without_keys
SELECT tenant_id, order_id, seq, plan_id, step_name FROM saga_steps
WHERE forward_key IS NULL OR compensation_key IS NULL;

-- name: fill_keys
-- A key already there (a call an older version made) is the one its service knows: kept.
UPDATE saga_steps AS st SET forward_key = COALESCE(st.forward_key, u.fk),
       compensation_key = COALESCE(st.compensation_key, u.ck)
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[]) AS u(t, oid, seq, fk, ck)
WHERE st.tenant_id = u.t AND st.order_id = u.oid AND st.seq = u.seq;
