-- Retries by time, not count, after a saga's pivot and for compensations (core/saga.py's table).
-- forward_since / compensation_since: the first attempt of the call's current budget (NULL: not yet tried, or
-- redriven: a redrive starts a new budget). retrying_since / retrying_service: the open saga's current call
-- failed at least once and has not succeeded yet (what `nexus sagas list --retrying` and the
-- nexus_saga_retrying gauges read); NULL once it succeeds, escalates or fails.

ALTER TABLE saga_steps ADD COLUMN forward_since timestamptz;
ALTER TABLE saga_steps ADD COLUMN compensation_since timestamptz;
ALTER TABLE sagas ADD COLUMN retrying_since timestamptz;
ALTER TABLE sagas ADD COLUMN retrying_service text;
CREATE INDEX sagas_retrying ON sagas (retrying_service, retrying_since) WHERE retrying_since IS NOT NULL;
