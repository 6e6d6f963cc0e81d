-- An order's finished_at is decided by the fold, not in SQL (issue 33 item 1, "no state transition in SQL").
--
-- Until now what finishes an order was decided in the database, three times over: gateway.sql `write_batch`
-- joined each upserted row's process for its terminal states (0039), the BEFORE UPDATE trigger
-- `orders_finished_at_update` did the same for any other statement (0027, 0033), and the insert trigger for an
-- order inserted without finished_at (0038, 0039). Now the batch's fold decides it (core/decide/finished.py:
-- tombstoned, aborted, a terminal state of its process, `completed` when the catalog lacks the process; an
-- order finished stays finished) and each order row of a BatchPlan carries it; `write_batch` writes finished_at
-- from that flag alone (now() the first time, kept afterwards), with no join and no transaction-local setting.
--
-- The trigger for other writers is dropped, not kept as a safety net: every writer of an order's status or
-- tombstone is the gateway's fold (steps, the steps API's plan start and end, the sweepers' expiries and
-- deadlines, the saga calls' outcomes, all through `write_batch`; saga.sql `set_outbox_counts` writes a count
-- only). A second definition of "finished" in PL/pgSQL would drift from the core's (it already differed: it
-- read `processes.terminal`, the core reads the definition), and would cost every statement its WHEN clause.
-- A person changing an order's status at psql sets finished_at (and so live_orders) by hand, as any other
-- column; docs/retention.md says so. With it go `nexus_order_set_finished_at`, the SQL `nexus_order_finished`
-- nothing calls any more, and the insert trigger's stamping: an order counts live exactly while finished_at is
-- NULL, as inserted (an order inserted finished carries its finished_at from write_batch).

DROP TRIGGER orders_finished_at_update ON orders;
DROP FUNCTION nexus_order_set_finished_at();
DROP FUNCTION nexus_order_finished(text, integer, text, boolean);

-- The inserted orders' counts, read once: live_orders +1 per order inserted without finished_at, unstarted_plans
-- -1 per order that had a plan row, per tenant (as 0039, without the process join and the stamping).
CREATE OR REPLACE FUNCTION nexus_usage_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT c.tenant_id, q.quota, q.used
    FROM (SELECT n.tenant_id, count(*) FILTER (WHERE n.finished_at IS NULL) AS live,
                 count(pl.order_id) AS planned
          FROM new_rows AS n
          LEFT JOIN plans AS pl ON pl.tenant_id = n.tenant_id AND pl.order_id = n.order_id
          GROUP BY n.tenant_id) AS c
    CROSS JOIN LATERAL (VALUES ('live_orders', c.live), ('unstarted_plans', -c.planned)) AS q(quota, used)
    WHERE q.used <> 0;
    RETURN NULL;
END $$;
