-- The live_orders and unstarted_plans counts of the orders the group commit writes are appended by its own
-- statement (gateway.sql `write_batch`), not by triggers on orders (benchmarks/RESULTS.md, "Round 25").
--
-- Under wrk the two triggers cost PostgreSQL about 21 us per event (pg_stat_user_functions): the insert's
-- statement trigger (migration 0043: a PL/pgSQL call per statement with a transition table, about 150 us per
-- group commit) and the row trigger counting an order's finishing (migration 0027: a PL/pgSQL call and an insert
-- of its own per order finished, about 57 us each, one order in five steps). With both turned off the gateway
-- served 1.07x the events a second of the same build with them (20 alternating pairs).
--
-- `write_batch` is the one writer of orders' rows and of their finished_at (migration 0043: every change of an
-- order's status goes through the fold, then this statement; saga.sql `set_outbox_counts` writes a count only),
-- and the gateway reads every order it writes first, under the order's advisory lock, in the same transaction
-- (`read_batch`, which now reads whether each is live: finished_at NULL). So the write knows each order's count
-- before and after: the gateway passes per tenant live_orders += (live after) - (live before), and the orders it
-- inserts, of which those with a plan row count -1 unstarted_plans (`batch_rows.order_counts`); `write_batch`
-- appends them in one insert. The same deltas the triggers appended (an order counts live exactly while its
-- finished_at is NULL), in one row per tenant and quota per transaction instead of one per statement plus one
-- per order finished; an order row written without its read is refused, never counted as new.
--
-- The delete trigger stays (retention and erasure remove orders by other statements). A person inserting or
-- updating orders at psql changes the counts by hand, as for finished_at (docs/retention.md), or counts them again
-- (`nexus_recount_usage`, below). So do the operators of a rolling upgrade across this migration once the
-- instances of the earlier release are stopped: until then those write orders without counting them.

DROP TRIGGER orders_usage_insert ON orders;
DROP FUNCTION nexus_usage_orders_insert();
DROP TRIGGER orders_usage_finished ON orders;
DROP FUNCTION nexus_usage_orders_finished();

-- Every tenant's usage (or one tenant's) counted again from the rows, for counts that drifted: orders written by
-- a gateway of an earlier release after this migration (it relied on the triggers dropped above), or rows
-- changed at psql (`nexus tenants recount`). The lock waits for every transaction that appended deltas and
-- holds off new ones until this one commits (a writer's delta is relative to what it read of its orders under
-- their locks, so the count and the deltas after it add up); two recounts take turns.
CREATE FUNCTION nexus_recount_usage(only_tenant text DEFAULT NULL) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE tenant_usage IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM tenant_usage WHERE only_tenant IS NULL OR tenant_id = only_tenant;
    INSERT INTO tenant_usage (tenant_id, quota, used)
    SELECT c.tenant_id, c.quota, c.n
    FROM (SELECT tenant_id, 'live_orders' AS quota, count(*) AS n FROM orders WHERE finished_at IS NULL
          GROUP BY tenant_id
          UNION ALL
          SELECT p.tenant_id, 'unstarted_plans', count(*) FROM plans AS p
          WHERE NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.tenant_id = p.tenant_id AND o.order_id = p.order_id)
          GROUP BY p.tenant_id
          UNION ALL
          SELECT tenant_id, 'buffered_steps', count(*) FROM pending_events GROUP BY tenant_id
          UNION ALL
          SELECT tenant_id, 'dead_letters', count(*) FROM dead_letters WHERE tenant_id IS NOT NULL GROUP BY tenant_id
          UNION ALL
          SELECT tenant_id, 'active_keys', count(*) FROM api_keys WHERE tenant_id IS NOT NULL AND revoked_at IS NULL
          GROUP BY tenant_id) AS c
    WHERE only_tenant IS NULL OR c.tenant_id = only_tenant;
END $$;
