-- The saga calls' Idempotency-Keys are computed when a step is recorded and kept in its row
-- (saga_steps.forward_key, saga_steps.compensation_key), so a change of secret never changes the key of a call
-- already in flight. The secret is NEXUS_SAGA_SECRET, or else the random one kept here: made once (by the
-- first gateway that needs it: INSERT ... ON CONFLICT DO NOTHING, then read) and shared by every instance.
--
-- Steps recorded by an older version have no keys yet: the keys those versions would have used depend on
-- the secret they ran with (NEXUS_SAGA_SECRET, else NEXUS_WEBHOOK_SECRET, else a fixed value), which only the
-- running gateway knows. So they are filled in at start, after the migrations, under that old derivation
-- (nexus.store.saga_keys.backfill), before any executor calls a service.
CREATE TABLE nexus_secrets (
    name       text PRIMARY KEY,
    secret     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX saga_steps_without_keys ON saga_steps (tenant_id, order_id, seq)
    WHERE forward_key IS NULL OR compensation_key IS NULL;
