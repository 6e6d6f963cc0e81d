-- Queries of the sagas: recorded by Gateway.submit, performed by the executors (nexus.saga).
-- No state transition here: every status, time and count a statement writes is a value the fold decided
-- (core/decide/outcomes.py, core/decide/saga_abort.py, core/saga.py `call_mark`) and passed in; now() only as
-- the time a row changed, a due time or a lease's end. The statements that pick work (claims, leases) are not
-- decisions of state; the one value computed here is the count of calls begun (start_forwards, below).

-- name: read_saga_gates
-- The open sagas of a batch's orders with their steps: what holds each order (core.saga).
SELECT s.tenant_id, s.order_id, s.status, st.seq, st.step_name, st.status AS step_status, st.attempts,
       st.compensation_attempts, st.pivot
FROM sagas AS s
JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON s.tenant_id = u.t AND s.order_id = u.oid
JOIN saga_steps AS st ON st.tenant_id = s.tenant_id AND st.order_id = s.order_id
ORDER BY s.tenant_id, s.order_id, st.seq;

-- name: upsert_sagas
-- A step with an effect took its seq: its saga, new with status $5 (core/decide/saga_abort.py NEW_SAGA), or
-- the order's existing one (its status kept) due now.
INSERT INTO sagas (tenant_id, order_id, plan_id, process, status, next_attempt_at)
SELECT tenant_id, order_id, plan_id, process, $5, now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(tenant_id, order_id, plan_id, process)
ON CONFLICT (tenant_id, order_id) DO UPDATE SET
    plan_id = EXCLUDED.plan_id, next_attempt_at = now(), updated_at = now();

-- name: insert_saga_steps
INSERT INTO saga_steps (tenant_id, order_id, seq, step_name, plan_id, event_id, service, compensable, pivot,
                        forward_path, forward_payload, forward_error, compensation_path, compensation_spec,
                        traceparent, envelope, forward_key, compensation_key)
SELECT tenant_id, order_id, seq, step_name, plan_id, event_id, service, compensable, pivot, forward_path,
       forward_payload::jsonb, forward_error, compensation_path, compensation_spec::jsonb, traceparent,
       envelope::jsonb, forward_key, compensation_key
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::bool[],
            $9::bool[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[],
            $17::text[], $18::text[])
    AS u(tenant_id, order_id, seq, step_name, plan_id, event_id, service, compensable, pivot, forward_path,
         forward_payload, forward_error, compensation_path, compensation_spec, traceparent, envelope, forward_key,
         compensation_key)
ON CONFLICT (tenant_id, order_id, seq) DO NOTHING;

-- name: notify_sagas
-- Delivered at commit, and only then: wakes idle executors (nexus.saga.wakeups) without their poll.
SELECT pg_notify('nexus_sagas', '');

-- name: next_due_in
-- Seconds until the next saga falls due (a retry's backoff, a lease running out); NULL: none is waiting.
SELECT EXTRACT(EPOCH FROM min(GREATEST(next_attempt_at, COALESCE(lease_until, next_attempt_at))) - now())::float8
FROM sagas WHERE next_attempt_at IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'COMPENSATING');

-- name: turn_sagas
-- The sagas the batch's aborts turn (core/decide/saga_abort.py): status $3, due now, each only if its status
-- is still the one the fold read ($4; an operator's redrive holds the saga's row lock, not the order's).
UPDATE sagas AS s SET status = u.status, next_attempt_at = now(), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(t, oid, status, expected)
WHERE s.tenant_id = u.t AND s.order_id = u.oid AND s.status = u.expected;

-- name: claim_sagas
-- Due sagas nobody holds (or whose holder's lease ran out: it died), taken with SKIP LOCKED + a lease.
UPDATE sagas AS s SET lease_until = now() + make_interval(secs => $1), lease_owner = $2, updated_at = now()
FROM (SELECT tenant_id, order_id FROM sagas
      WHERE next_attempt_at <= now() AND status IN ('PENDING', 'RUNNING', 'COMPENSATING')
        AND (lease_until IS NULL OR lease_until < now())
      ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED) AS due
WHERE s.tenant_id = due.tenant_id AND s.order_id = due.order_id
RETURNING s.tenant_id, s.order_id, s.plan_id, s.process, s.status;

-- name: read_steps
SELECT *, envelope::text AS envelope_text, forward_response::text AS response_text FROM saga_steps WHERE tenant_id = $1 AND order_id = $2 ORDER BY seq;

-- name: read_steps_of
-- The steps of several sagas at once (those a claim took, those a batch of outcomes goes on with).
SELECT st.*, st.envelope::text AS envelope_text, st.forward_response::text AS response_text
FROM saga_steps AS st JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON st.tenant_id = u.t AND st.order_id = u.oid
ORDER BY st.tenant_id, st.order_id, st.seq;

-- name: lock_saga
SELECT status, lease_owner, retrying_since, retrying_service FROM sagas WHERE tenant_id = $1 AND order_id = $2
FOR UPDATE;

-- name: start_forwards
-- Written (and committed) before the calls: a crash after it leaves each step uncertain, never forgotten.
-- One row per (tenant, order, seq): the attempts marked by several sagas' tasks at once. The status and
-- uncertainty are core/saga.py `call_mark`'s ($5, $6; NULL: kept). The attempt is counted here
-- (`attempts + 1`): a counter of calls begun, not a decision (two executors overlapping after a lease lapsed
-- each make a call and each counts; the number returned is what core/saga.py decides from).
-- elapsed_s: seconds since the first attempt of the call's budget (core/saga.py), by the database's clock.
UPDATE saga_steps AS st SET status = COALESCE(u.status, st.status), attempts = st.attempts + 1,
       uncertain = COALESCE(u.uncertain, st.uncertain), forward_key = u.k,
       forward_since = COALESCE(st.forward_since, now()), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::bool[])
    AS u(t, oid, seq, k, status, uncertain)
WHERE st.tenant_id = u.t AND st.order_id = u.oid AND st.seq = u.seq
RETURNING st.tenant_id, st.order_id, st.attempts, EXTRACT(EPOCH FROM now() - st.forward_since)::float8 AS elapsed_s;

-- name: start_compensations
-- As start_forwards, for compensations ($6, $7 the mark's status and uncertainty; NULL: kept), counted in
-- compensation_attempts.
UPDATE saga_steps AS st SET compensation_attempts = st.compensation_attempts + 1, compensation_key = u.k,
       compensating_payload = u.body::jsonb, compensation_since = COALESCE(st.compensation_since, now()),
       status = COALESCE(u.status, st.status), uncertain = COALESCE(u.uncertain, st.uncertain), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::bool[])
    AS u(t, oid, seq, k, body, status, uncertain)
WHERE st.tenant_id = u.t AND st.order_id = u.oid AND st.seq = u.seq
RETURNING st.tenant_id, st.order_id, st.compensation_attempts AS attempts,
          EXTRACT(EPOCH FROM now() - st.compensation_since)::float8 AS elapsed_s;

-- name: finish_forwards
-- Under a batch of outcomes' advisory locks (taken first): the forward calls' steps finished ($3-$10, one per
-- forward outcome; a data-modifying WITH runs to its end whatever the SELECT returns; $10 when the step was
-- executed, NULL: kept), and the batch's sagas ($1, $2) locked and returned, in one round trip.
WITH finished AS (
    UPDATE saga_steps AS st SET status = f.status, uncertain = f.uncertain, forward_response = f.response::jsonb,
           last_error = f.error, executed_at = COALESCE(f.executed_at, st.executed_at), updated_at = now()
    FROM unnest($3::text[], $4::text[], $5::int[], $6::text[], $7::bool[], $8::text[], $9::text[],
                $10::timestamptz[])
        AS f(t, oid, seq, status, uncertain, response, error, executed_at)
    WHERE st.tenant_id = f.t AND st.order_id = f.oid AND st.seq = f.seq
)
SELECT s.tenant_id, s.order_id, s.status, s.retrying_since
FROM sagas AS s JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON s.tenant_id = u.t AND s.order_id = u.oid
ORDER BY s.tenant_id, s.order_id
FOR UPDATE OF s;

-- name: finish_compensations
-- The compensated steps of a batch of outcomes: status $4, response $5, compensated at $6 (NULL: kept).
UPDATE saga_steps AS st SET status = u.status, compensating_response = u.response::jsonb, last_error = NULL,
       compensated_at = COALESCE(u.compensated_at, st.compensated_at), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::timestamptz[])
    AS u(t, oid, seq, status, response, compensated_at)
WHERE st.tenant_id = u.t AND st.order_id = u.oid AND st.seq = u.seq;

-- name: set_outbox_counts
-- The orders' notification counts once their compensations' notifications took their positions (the fold's).
UPDATE orders AS o SET outbox_count = u.n, updated_at = now()
FROM unnest($1::text[], $2::text[], $3::int[]) AS u(t, oid, n)
WHERE o.tenant_id = u.t AND o.order_id = u.oid;

-- name: set_saga
-- $4: seconds until the next attempt (NULL: not due, nothing to do until the agent's next step); $6, $7: since
-- when and on which service it retries (NULL: not retrying), as the fold decided; its lease cleared.
UPDATE sagas SET status = $3, error = COALESCE($5, error), lease_until = NULL, lease_owner = NULL,
       next_attempt_at = now() + make_interval(secs => $4::float8), retrying_since = $6, retrying_service = $7,
       updated_at = now()
WHERE tenant_id = $1 AND order_id = $2;

-- name: set_sagas
-- A batch of outcomes' sagas, as the fold decided them. $4: seconds until the next attempt (NULL: not due,
-- nothing to do until the agent's next step); $6, $7: the lease's seconds and owner when the writer goes on
-- with the saga at once (due now: nobody else claims it in between, and no claim is needed), NULL: cleared;
-- $8, $9: since when and on which service it retries (NULL: not retrying). Returns the steps of the sagas
-- kept, as this transaction left them (its earlier statements' writes are visible here).
WITH kept AS (
    UPDATE sagas AS s SET status = u.status, error = COALESCE(u.error, s.error),
           lease_until = now() + make_interval(secs => u.lease_s), lease_owner = u.owner,
           next_attempt_at = now() + make_interval(secs => u.delay),
           retrying_since = u.since, retrying_service = u.service, updated_at = now()
    FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::float8[], $7::text[],
                $8::timestamptz[], $9::text[])
        AS u(t, oid, status, delay, error, lease_s, owner, since, service)
    WHERE s.tenant_id = u.t AND s.order_id = u.oid
    RETURNING s.tenant_id, s.order_id, u.owner IS NOT NULL AS keep
)
SELECT st.*, st.envelope::text AS envelope_text, st.forward_response::text AS response_text
FROM saga_steps AS st JOIN kept ON st.tenant_id = kept.tenant_id AND st.order_id = kept.order_id AND kept.keep
ORDER BY st.tenant_id, st.order_id, st.seq;

-- name: release_saga
UPDATE sagas SET lease_until = NULL, lease_owner = NULL,
       next_attempt_at = now() + make_interval(secs => $3), updated_at = now()
WHERE tenant_id = $1 AND order_id = $2 AND lease_owner = $4;

-- name: release_sagas
-- Claimed sagas the claimer starts no task for (their service has no free call slot, or an open breaker):
-- released at once, each due again after its delay ($3, seconds).
UPDATE sagas AS s SET lease_until = NULL, lease_owner = NULL,
       next_attempt_at = now() + make_interval(secs => u.delay), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::float8[]) AS u(t, oid, delay)
WHERE s.tenant_id = u.t AND s.order_id = u.oid AND s.lease_owner = $4;

-- name: list_sagas
-- $4: only the retrying ones (an open saga whose current call failed at least once and has not succeeded).
SELECT s.tenant_id, s.order_id, s.plan_id, s.process, s.status, s.error, s.updated_at, s.next_attempt_at,
       s.retrying_since, s.retrying_service, count(st.seq) AS steps
FROM sagas AS s LEFT JOIN saga_steps AS st ON st.tenant_id = s.tenant_id AND st.order_id = s.order_id
WHERE ($1::text IS NULL OR s.status = $1) AND ($2::text IS NULL OR s.tenant_id = $2)
  AND (NOT $4::bool OR (s.retrying_since IS NOT NULL AND s.status IN ('PENDING', 'RUNNING', 'COMPENSATING')))
GROUP BY s.tenant_id, s.order_id ORDER BY s.updated_at DESC LIMIT $3;

-- name: redrive_saga
UPDATE sagas SET status = $3, next_attempt_at = now(), error = NULL, lease_until = NULL, retrying_since = NULL,
       retrying_service = NULL, updated_at = now()
WHERE tenant_id = $1 AND order_id = $2 AND status = $4
RETURNING status;

-- name: redrive_forwards
-- An escalated saga's steps attempted again from 0 with a new budget, each with the status the core gave it
-- (core/decide/outcomes.py `redriven`): one row per step ($3 seq, $4 status).
UPDATE saga_steps AS st SET status = u.status, attempts = 0, forward_since = NULL, updated_at = now()
FROM unnest($3::int[], $4::text[]) AS u(seq, status)
WHERE st.tenant_id = $1 AND st.order_id = $2 AND st.seq = u.seq;

-- name: redrive_compensations
-- A failed saga's compensations attempted again from 0 with a new budget (no step's status changes).
UPDATE saga_steps SET compensation_attempts = 0, compensation_since = NULL, updated_at = now()
WHERE tenant_id = $1 AND order_id = $2;

-- name: order_saga
SELECT s.status, s.error, s.next_attempt_at, s.retrying_since, st.seq, st.step_name, st.status AS step_status, st.service, st.attempts,
       st.compensation_attempts, st.pivot, st.compensable, st.forward_response::text AS result,
       st.compensating_response::text AS compensation, st.last_error
FROM sagas AS s LEFT JOIN saga_steps AS st ON st.tenant_id = s.tenant_id AND st.order_id = s.order_id
WHERE s.tenant_id = $1 AND s.order_id = $2 ORDER BY st.seq;

-- name: saga_gauges
SELECT status, count(*) AS n FROM sagas GROUP BY status;

-- name: saga_retrying_gauges
-- Per service, the retrying sagas (open, current call failed at least once, not yet succeeded) and the
-- seconds since the oldest of them began retrying.
SELECT retrying_service AS service, count(*) AS n,
       EXTRACT(EPOCH FROM now() - min(retrying_since))::float8 AS oldest_s
FROM sagas
WHERE retrying_since IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'COMPENSATING')
GROUP BY retrying_service;
