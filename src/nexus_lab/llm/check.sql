-- Read-only queries of `nexus check` for an LLM planner's report (kind "llm").

-- name: outbox
SELECT order_id, position, event_id::text AS event_id, event_type, seq_id,
       payload -> 'event' -> 'data' ->> 'abort_code' AS abort_code
FROM outbox WHERE order_id = ANY($1::text[]) ORDER BY order_id, position;

-- name: rejected
SELECT order_id, event_id::text AS event_id, event_type, seq_id, code, check_id
FROM rejected_events WHERE order_id = ANY($1::text[]);

-- name: orders
SELECT order_id, plan_id, status, last_seq, outbox_count, tombstone FROM orders WHERE order_id = ANY($1::text[]);
