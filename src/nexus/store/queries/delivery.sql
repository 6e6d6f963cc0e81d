-- Queries of the webhook dispatcher, subscriptions and dead deliveries.
--
-- Delivery states and their transitions are core/delivery.py's (`DeliveryState`, `next_step`): the
-- statements that change a state (finish, redrive_delivery) take the states as parameters. Filters on
-- 'pending' stay literal where a partial index (WHERE state = 'pending', migrations 0002/0003) must serve
-- them: the planner can only use such an index when it sees the constant. tests/unit/test_delivery_states.py
-- checks every state literal here is a DeliveryState value.

-- name: claimable_subscriptions
-- The enabled subscriptions with their tenant (NULL: every tenant's) and whether a dispatcher may claim
-- for them (breaker closed). Claims are made per subscription, so one with a backlog or an open breaker
-- never slows the claims of another, and shared out per tenant (delivery/bulkheads.py, which also needs
-- to know how many tenants have subscriptions, claimable now or not).
SELECT s.id, s.tenant_id, coalesce(b.state, 'closed') = 'closed' AS claimable FROM subscriptions AS s
LEFT JOIN circuit_breakers AS b ON b.subscription_id = s.id
WHERE s.enabled
ORDER BY s.id;

-- name: claim
-- The due, unleased heads of one subscription, oldest first. Only a head (the oldest pending
-- notification of its order for this subscription, see migration 0003) is ever claimed: that is what
-- keeps each order in position order, across any number of instances. The subscription is checked
-- again here in case its breaker opened since `claimable_subscriptions`, unless $5 says this is the
-- one probe a half-open breaker lets through (for the instance holding its probe slot). SKIP LOCKED lets instances
-- claim side by side; the lease (not the row lock, released at commit) keeps a claimed row away from
-- others while its request runs. The attempt is counted here, as it begins (`attempts + 1`, a counter, not
-- a decision: a dispatcher that dies during the request has still made the attempt, and the count rises by
-- one per claim whoever claims); what the attempt's outcome makes of the count is core/delivery.py's
-- (`written`: a released attempt is given back by `finish`). Returns the last answer too, which a released
-- attempt keeps.
WITH claimable AS (
    SELECT d.outbox_id, d.subscription_id
    FROM deliveries AS d
    WHERE d.subscription_id = $4
      AND d.state = 'pending'
      AND d.head
      AND d.next_attempt_at <= now()
      AND (d.lease_until IS NULL OR d.lease_until < now())
      AND EXISTS (
          SELECT 1 FROM subscriptions AS s
          LEFT JOIN circuit_breakers AS b ON b.subscription_id = s.id
          WHERE s.id = $4 AND s.enabled AND ($5::boolean OR coalesce(b.state, 'closed') = 'closed'))
    ORDER BY d.next_attempt_at
    LIMIT $3
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE deliveries AS d
SET lease_owner = $1, lease_until = now() + make_interval(secs => $2), attempts = d.attempts + 1
FROM claimable AS c, outbox AS o, subscriptions AS s
WHERE d.outbox_id = c.outbox_id AND d.subscription_id = c.subscription_id
  AND o.id = d.outbox_id AND s.id = d.subscription_id
RETURNING d.outbox_id, d.subscription_id, d.tenant_id, d.order_id, d.position, d.attempts, d.last_status,
          d.last_error, o.event_type, o.payload::text AS body, o.traceparent, o.created_at, s.url, s.secret, s.format,
          s.tenant_id AS subscription_tenant;

-- name: finish
-- Record the results of attempts, each only if this instance still holds its lease and the row still has
-- the attempts its claim left ($5): a dispatcher whose lease expired (and whose row another instance, or
-- this one, re-claimed) cannot overwrite the newer outcome. Every value comes decided from core/delivery.py
-- (`next_step`, then `written`) and is written as given: the state, the attempts (a released attempt given
-- back), the last answer, the stamps of the state reached and the dead reason (NULL: the column kept), a
-- delay (NULL: the schedule kept), and whether the row may stay its order's head (only lowered here: a
-- redrive may have cleared the flag since the claim).
-- The rows are found through the primary key whatever the table's size and statistics. Written as a plain join on the unnest, with the lease test as a filter, the planner estimated
-- one row for `lease_owner = $1` (nearly every row has none), scanned the whole table once per batch
-- and rescanned the unnest once per row; given the ids as a constant array, it still preferred a scan
-- while the table was small. Now the ids come from the batch as an opaque array (an InitPlan: the
-- planner assumes a handful of values and takes the index) and the owner rides in the materialized
-- batch, so its test is a join condition and the batch is hashed.
WITH u AS MATERIALIZED (
    SELECT u.*, $1::text AS owner
    FROM unnest($2::uuid[], $3::bigint[], $4::text[], $5::int[], $6::int[], $7::float8[], $8::int[], $9::text[],
                $10::timestamptz[], $11::timestamptz[], $12::text[], $13::boolean[])
        AS u(outbox_id, subscription_id, state, read_attempts, attempts, delay_ms, last_status, last_error,
             delivered_at, dead_at, dead_reason, head)
)
UPDATE deliveries AS d
SET state = u.state,
    attempts = u.attempts,
    next_attempt_at = coalesce(now() + u.delay_ms * interval '1 millisecond', d.next_attempt_at),
    last_status = u.last_status,
    last_error = u.last_error,
    delivered_at = coalesce(u.delivered_at, d.delivered_at),
    dead_at = coalesce(u.dead_at, d.dead_at),
    dead_reason = coalesce(u.dead_reason, d.dead_reason),
    head = d.head AND u.head,
    lease_owner = NULL,
    lease_until = NULL
FROM u
-- Only pending rows carry a lease, so the lease test is also the state test; leaving `state` out keeps
-- the planner on the primary key even before the table has statistics (a fresh database), instead of
-- a scan of every pending row through a partial index.
WHERE d.outbox_id = ANY (ARRAY(SELECT outbox_id FROM u))
  AND d.outbox_id = u.outbox_id AND d.subscription_id = u.subscription_id
  AND d.lease_owner = u.owner AND d.attempts = u.read_attempts
RETURNING d.outbox_id, d.subscription_id, d.tenant_id, d.order_id, u.state;

-- name: promote_heads
-- Make the oldest pending notification of each given (subscription, order) its head. Run after the
-- old head was delivered or died (finish clears its flag) or was redriven (see clear_heads), under the
-- orders' advisory locks like the gateway's writes of new deliveries, so a head that ends while the
-- gateway adds the order's next notification is never lost between the two. Driven from the given
-- pairs by index and primary key, whatever the size of the backlog or the table's statistics: the new
-- heads are found first, once per pair (MATERIALIZED), then updated by primary key. Written as one
-- UPDATE ... FROM unnest CROSS JOIN LATERAL, the planner may join every non-head row of the
-- subscription to every pair and run the lateral search for each of those (pairs x backlog; seconds
-- for a batch of 50 over 500 rows, longer than a lease).
WITH first AS MATERIALIZED (
    SELECT u.subscription_id, f.outbox_id
    FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(subscription_id, order_id, tenant_id)
    CROSS JOIN LATERAL (
        SELECT p.outbox_id FROM deliveries AS p
        WHERE p.subscription_id = u.subscription_id AND p.tenant_id = u.tenant_id AND p.order_id = u.order_id
          AND p.state = 'pending'
        ORDER BY p.position
        LIMIT 1
    ) AS f
)
-- The update finds them by primary key (`outbox_id = ANY(...)`): joined to `first` alone, the planner
-- hashed a scan of every non-head row of the table per batch while the table was small enough.
UPDATE deliveries AS d SET head = true
FROM first
WHERE d.outbox_id = ANY (ARRAY(SELECT outbox_id FROM first))
  AND d.outbox_id = first.outbox_id AND d.subscription_id = first.subscription_id AND NOT d.head;

-- name: clear_heads
-- Before a redriven (lower) position takes over: the (subscription, order) loses its current head.
UPDATE deliveries SET head = false
WHERE subscription_id = $1 AND order_id = $2 AND tenant_id = $3 AND state = 'pending' AND head;

-- name: ensure_breakers
INSERT INTO circuit_breakers (subscription_id)
SELECT unnest($1::bigint[])
ON CONFLICT (subscription_id) DO NOTHING;

-- name: lock_breakers
SELECT subscription_id, state, failure_count, last_failure_at, open_until, probe_owner, probe_until,
       now() AS now
FROM circuit_breakers
WHERE subscription_id = ANY($1::bigint[])
ORDER BY subscription_id
FOR UPDATE;

-- name: lock_probe_candidates
-- Breakers that are not closed, for an instance to try and take a probe slot, with their subscription's
-- tenant (a probe holds a slot of its tenant's bulkhead); SKIP LOCKED because another instance deciding on
-- the same breaker right now is as good as us deciding.
SELECT b.subscription_id, b.state, b.failure_count, b.last_failure_at, b.open_until, b.probe_owner,
       b.probe_until, now() AS now, s.tenant_id
FROM circuit_breakers AS b
JOIN subscriptions AS s ON s.id = b.subscription_id
WHERE b.state <> 'closed'
ORDER BY b.subscription_id
FOR UPDATE OF b SKIP LOCKED;

-- name: write_breaker
UPDATE circuit_breakers
SET state = $2, failure_count = $3, last_failure_at = $4, open_until = $5, probe_owner = $6,
    probe_until = $7, updated_at = now()
WHERE subscription_id = $1;

-- name: breaker_states
-- Enabled subscriptions only, oldest first: the metric series follow this list (bounded, see dispatcher).
SELECT b.subscription_id, s.name, b.state FROM circuit_breakers AS b
JOIN subscriptions AS s ON s.id = b.subscription_id
WHERE s.enabled
ORDER BY s.id;

-- name: upsert_subscription
INSERT INTO subscriptions (name, url, secret, event_types, enabled, tenant_id, format)
VALUES ($1, $2, $3, $4::text[], true, $5, $6)
ON CONFLICT ((coalesce(tenant_id, '*')), name) DO UPDATE SET url = EXCLUDED.url, secret = EXCLUDED.secret,
    event_types = EXCLUDED.event_types, enabled = true, format = EXCLUDED.format
RETURNING id, name, url, event_types, enabled, created_at, tenant_id, format;

-- name: insert_subscription
INSERT INTO subscriptions (name, url, secret, event_types, enabled, tenant_id, format)
VALUES ($1, $2, $3, $4::text[], true, $5, $6)
RETURNING id, name, url, event_types, enabled, created_at, tenant_id, format;

-- name: list_subscriptions
-- $1: a tenant, or NULL for every subscription (a principal spanning every tenant).
SELECT s.id, s.name, s.url, s.event_types, s.enabled, s.created_at, s.tenant_id, s.format,
       coalesce(b.state, 'closed') AS breaker_state
FROM subscriptions AS s LEFT JOIN circuit_breakers AS b ON b.subscription_id = s.id
WHERE $1::text IS NULL OR s.tenant_id = $1
ORDER BY s.id;

-- name: disable_subscription
-- $1 an id or a name, $2 the caller's tenant (NULL: a caller spanning every tenant). Names are unique per
-- tenant (migration 0013), so a name is looked up in the caller's own tenant only: a tenant's key finds
-- its tenant's subscription, a key spanning every tenant the subscriptions spanning every tenant (another
-- tenant's it names by id).
UPDATE subscriptions SET enabled = false
WHERE (id::text = $1 AND ($2::text IS NULL OR tenant_id = $2))
   OR (name = $1 AND coalesce(tenant_id, '*') = coalesce($2::text, '*'))
RETURNING id, name, url, event_types, enabled, created_at, tenant_id, format;

-- name: dead_deliveries
SELECT d.outbox_id, d.subscription_id, s.name AS subscription, d.order_id, d.position, o.event_type,
       d.attempts, d.last_status, d.last_error, d.dead_reason, d.dead_at
FROM deliveries AS d
JOIN subscriptions AS s ON s.id = d.subscription_id
JOIN outbox AS o ON o.id = d.outbox_id
WHERE d.state = 'dead' AND ($1::bigint IS NULL OR d.subscription_id = $1)
  AND ($4::text IS NULL OR d.tenant_id = $4)
ORDER BY d.dead_at, d.order_id, d.position
LIMIT $2 OFFSET $3;

-- name: delivery_order
SELECT tenant_id, order_id FROM deliveries
WHERE outbox_id = $1 AND subscription_id = $2 AND ($3::text IS NULL OR tenant_id = $3);

-- name: redrive_delivery
-- A dead delivery back to pending with fresh attempts. It goes out when it is its order's oldest
-- pending notification again; if later ones were already delivered, the subscriber sees it after them.
-- The transition (core/delivery.py `redrive`): $4 (dead) to $3 (pending).
UPDATE deliveries
SET state = $3, attempts = 0, next_attempt_at = now(), dead_at = NULL, dead_reason = NULL,
    lease_owner = NULL, lease_until = NULL
WHERE outbox_id = $1 AND subscription_id = $2 AND state = $4
RETURNING outbox_id, subscription_id, tenant_id, order_id, position;

-- name: accounting
-- Per subscription: notifications it should get, and where each one is (delivered + dead + pending).
-- $1: the viewer's tenant (its subscriptions only; another tenant's are not counted), NULL: every tenant.
-- Counted per subscription (LATERAL) from the index deliveries_subscription_state alone (migration 0032):
-- one tenant's view reads its own subscriptions' entries, never another tenant's deliveries.
SELECT s.id AS subscription_id, s.name, a.total, a.delivered, a.dead, a.pending
FROM subscriptions AS s CROSS JOIN LATERAL (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE d.state = 'delivered') AS delivered,
           count(*) FILTER (WHERE d.state = 'dead') AS dead,
           count(*) FILTER (WHERE d.state = 'pending') AS pending
    FROM deliveries AS d
    WHERE d.subscription_id = s.id
) AS a
WHERE $1::text IS NULL OR s.tenant_id = $1
ORDER BY s.id;

-- name: record_attempts
-- one row per counted attempt of an outcome batch (migration 0010), in the batch's
-- transaction; `at` is the sender's clock when the request went out (the database's, if none was sent).
INSERT INTO delivery_attempts
    (outbox_id, subscription_id, tenant_id, order_id, attempt, at, outcome, status, error_class, duration_ms)
SELECT u.outbox_id, u.subscription_id, u.tenant_id, u.order_id, u.attempt,
       coalesce(to_timestamp(u.sent_at), now()), u.outcome, u.status, u.error_class, u.duration_ms
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::int[], $6::float8[], $7::text[], $8::int[],
            $9::text[], $10::float4[])
    AS u(outbox_id, subscription_id, tenant_id, order_id, attempt, sent_at, outcome, status, error_class, duration_ms);

-- name: prune_attempts
-- the attempts older than the retention ($1 seconds), at most $2 rows per statement so a
-- large backlog is pruned in short transactions; returns how many went.
WITH old AS (
    SELECT id FROM delivery_attempts WHERE at < now() - make_interval(secs => $1) ORDER BY at LIMIT $2
)
DELETE FROM delivery_attempts AS a USING old WHERE a.id = old.id;
