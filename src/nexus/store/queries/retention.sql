-- Retention (nexus.retention, docs/retention.md): finished orders leave with everything about them, a marker
-- per removed order stays. Every query of a removal takes the orders as $1 (tenants) / $2 (order ids).
-- An order is finished when its (process, status) is one of the terminal pairs $1/$2 the remover takes from
-- the process catalog (nothing decided here: the catalog says which states end a process, in every version).

-- name: due_orders
-- Finished orders past their tenant's retention ($4 seconds unless tenant_limits.retention_s says otherwise),
-- oldest first by when they finished, with none of their deliveries pending, no open saga (status not among the
-- closed ones $5) and no approval pending; at most $3, locked (SKIP LOCKED: another remover takes others).
-- Bounded per tenant: nexus_finished_tenants() (migration 0034) steps through the tenants holding finished
-- orders (one probe each of the partial index orders_tenant_finished_at, migration 0030), and each tenant's scan reads only its orders
-- finished before its own cutoff (a tenant period longer than $4 reads nothing until its orders are due). Each
-- tenant locks at most $3 of its own; the oldest $3 of them all are returned, the rest stay for the next pass.
-- orders_tenant_finished_at is the only index on finished_at (0030 dropped orders_finished_at, with which the
-- planner read every tenant's orders past the cutoff and filtered them by tenant).
SELECT due.tenant_id, due.order_id
FROM nexus_finished_tenants() AS t(tenant_id)
LEFT JOIN tenant_limits AS l ON l.tenant_id = t.tenant_id
CROSS JOIN LATERAL (
    SELECT o.tenant_id, o.order_id, o.finished_at
    FROM orders AS o
    JOIN unnest($1::text[], $2::text[]) AS p(process, status) ON o.process = p.process AND o.status = p.status
    WHERE o.tenant_id = t.tenant_id
      AND o.finished_at < now() - make_interval(secs => coalesce(l.retention_s, $4))
      AND NOT EXISTS (SELECT 1 FROM outbox AS x JOIN deliveries AS d ON d.outbox_id = x.id
                      WHERE x.tenant_id = o.tenant_id AND x.order_id = o.order_id AND d.state = 'pending')
      AND NOT EXISTS (SELECT 1 FROM sagas AS s WHERE s.tenant_id = o.tenant_id AND s.order_id = o.order_id
                      AND s.status <> ALL ($5::text[]))
      AND NOT EXISTS (SELECT 1 FROM approvals AS a WHERE a.tenant_id = o.tenant_id AND a.order_id = o.order_id
                      AND a.status = 'pending')
    ORDER BY o.finished_at
    LIMIT $3
    FOR UPDATE OF o SKIP LOCKED
) AS due
ORDER BY due.finished_at
LIMIT $3;

-- name: lock_removable
-- The gateway's advisory locks of the orders (gateway.sql lock_orders' keys), taken only where free: an order
-- a gateway is deciding now is left for the next pass, and a step arriving after this waits for the commit
-- and is then decided from the marker. Each free order with how many of its deliveries are in each state,
-- from which core/delivery.py `summarise` decides its marker's delivery state. The locks are taken first,
-- once per order (MATERIALIZED), the counts read only for the orders locked.
WITH free AS MATERIALIZED (
    SELECT t AS tenant_id, o AS order_id
    FROM unnest($1::text[], $2::text[]) AS u(t, o)
    WHERE pg_try_advisory_xact_lock(nexus_order_lock(t, o))
)
SELECT f.tenant_id, f.order_id, d.delivered, d.dead, d.pending
FROM free AS f
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE dl.state = 'delivered') AS delivered,
           count(*) FILTER (WHERE dl.state = 'dead') AS dead,
           count(*) FILTER (WHERE dl.state = 'pending') AS pending
    FROM outbox AS x JOIN deliveries AS dl ON dl.outbox_id = x.id
    WHERE x.tenant_id = f.tenant_id AND x.order_id = f.order_id
) AS d;

-- name: insert_markers
-- The removed orders' markers: the order's row as it is, and its deliveries' state and counts as given ($3-$6,
-- decided from lock_removable's counts).
INSERT INTO removed_orders (tenant_id, order_id, plan_id, process, final_status, tombstone, last_seq, notifications,
                            delivery_state, delivered, dead, pending, finished_at)
SELECT o.tenant_id, o.order_id, o.plan_id, o.process, o.status, o.tombstone, o.last_seq, o.outbox_count,
       u.delivery_state, u.delivered, u.dead, u.pending, coalesce(o.finished_at, o.updated_at)
FROM orders AS o
JOIN unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::int[])
    AS u(t, oid, delivery_state, delivered, dead, pending) ON o.tenant_id = u.t AND o.order_id = u.oid
ON CONFLICT (tenant_id, order_id) DO UPDATE SET
    plan_id = EXCLUDED.plan_id, process = EXCLUDED.process, final_status = EXCLUDED.final_status,
    tombstone = EXCLUDED.tombstone, last_seq = EXCLUDED.last_seq, notifications = EXCLUDED.notifications,
    delivery_state = EXCLUDED.delivery_state, delivered = EXCLUDED.delivered, dead = EXCLUDED.dead,
    pending = EXCLUDED.pending,
    finished_at = EXCLUDED.finished_at, removed_at = now();

-- name: delete_order_rows
-- The orders' rows of table $3 (one of the remover's REMOVED_TABLES with tenant_id and order_id columns):
-- how many went. A sagas' saga_steps go with them (ON DELETE CASCADE).
SELECT nexus_delete_order_rows($3, $1::text[], $2::text[]) AS removed;

-- name: delete_deliveries
DELETE FROM deliveries AS r USING outbox AS x, unnest($1::text[], $2::text[]) AS u(t, oid)
WHERE r.outbox_id = x.id AND x.tenant_id = u.t AND x.order_id = u.oid;

-- name: delete_dead_letters
-- The order's dead letters once redriven or older than its tenant's period ($3 seconds unless
-- tenant_limits.retention_s says otherwise); their redrive records cascade.
DELETE FROM dead_letters AS r
USING unnest($1::text[], $2::text[]) AS u(t, oid) LEFT JOIN tenant_limits AS l ON l.tenant_id = u.t
WHERE r.order_id = u.oid AND r.tenant_id = u.t
  AND (r.created_at < now() - make_interval(secs => coalesce(l.retention_s, $3))
       OR EXISTS (SELECT 1 FROM dead_letter_redrives AS x WHERE x.dead_letter_id = r.id));

-- name: stray_dead_letters
-- Dead letters no order row names, older than their tenant's period ($1 seconds unless
-- tenant_limits.retention_s says otherwise), oldest first: at most $2, locked (SKIP LOCKED: another remover
-- takes others). That is those without an order id (parse errors, invalid envelopes, quota refusals), those
-- naming an order that never started or was removed; an order's own dead letters go with it (delete_dead_letters).
-- Per tenant, as due_orders: nexus_dead_letter_tenants() (migration 0035) steps through the tenants holding
-- dead letters, and each tenant's scan of dead_letters_tenant_created_at stops at its own cutoff. A dead letter
-- of no known tenant (tenant_id NULL) has the default period and is checked against the default tenant's orders.
DELETE FROM dead_letters WHERE id IN (
    SELECT c.id FROM (
        SELECT s.id, s.created_at
        FROM nexus_dead_letter_tenants() AS t(tenant_id)
        LEFT JOIN tenant_limits AS l ON l.tenant_id = t.tenant_id
        CROSS JOIN LATERAL (
            SELECT d.id, d.created_at FROM dead_letters AS d
            WHERE d.tenant_id = t.tenant_id
              AND d.created_at < now() - make_interval(secs => coalesce(l.retention_s, $1))
              AND NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.tenant_id = d.tenant_id AND o.order_id = d.order_id)
            ORDER BY d.created_at
            LIMIT $2
            FOR UPDATE OF d SKIP LOCKED
        ) AS s
        UNION ALL
        SELECT n.id, n.created_at FROM (
            SELECT d.id, d.created_at FROM dead_letters AS d
            WHERE d.tenant_id IS NULL AND d.created_at < now() - make_interval(secs => $1)
              AND NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.tenant_id = 'default' AND o.order_id = d.order_id)
            ORDER BY d.created_at
            LIMIT $2
            FOR UPDATE OF d SKIP LOCKED
        ) AS n
    ) AS c
    ORDER BY c.created_at
    LIMIT $2
);

-- name: expire_markers
-- Markers kept longer than $1 seconds: at most $2.
DELETE FROM removed_orders WHERE (tenant_id, order_id) IN (
    SELECT tenant_id, order_id FROM removed_orders
    WHERE removed_at < now() - make_interval(secs => $1)
    ORDER BY removed_at LIMIT $2 FOR UPDATE SKIP LOCKED
);

-- name: oldest_finished
-- How long ago the oldest finished order still present finished (0: none), and how far past its own period
-- the most overdue one is (0: none is due); the pairs and $3 as in due_orders. Both per tenant (stepped through
-- by nexus_finished_tenants()): its oldest finished order, and for the overdue only if before that tenant's cutoff.
SELECT coalesce((SELECT max(extract(epoch FROM now() - f.finished_at))
                 FROM nexus_finished_tenants() AS t(tenant_id)
                 CROSS JOIN LATERAL (
                     SELECT o.finished_at
                     FROM orders AS o
                     JOIN unnest($1::text[], $2::text[]) AS p(process, status)
                       ON o.process = p.process AND o.status = p.status
                     WHERE o.tenant_id = t.tenant_id AND o.finished_at IS NOT NULL
                     ORDER BY o.finished_at LIMIT 1
                 ) AS f), 0)::float8 AS oldest_s,
       coalesce((SELECT max(extract(epoch FROM now() - d.finished_at) - coalesce(l.retention_s, $3))
                 FROM nexus_finished_tenants() AS t(tenant_id)
                 LEFT JOIN tenant_limits AS l ON l.tenant_id = t.tenant_id
                 CROSS JOIN LATERAL (
                     SELECT o.finished_at
                     FROM orders AS o
                     JOIN unnest($1::text[], $2::text[]) AS p(process, status)
                       ON o.process = p.process AND o.status = p.status
                     WHERE o.tenant_id = t.tenant_id
                       AND o.finished_at < now() - make_interval(secs => coalesce(l.retention_s, $3))
                     ORDER BY o.finished_at LIMIT 1
                 ) AS d), 0)::float8 AS overdue_s;

-- name: marker_counts
SELECT count(*) AS markers FROM removed_orders;
