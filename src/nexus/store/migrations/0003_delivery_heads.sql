-- The head of each (order, subscription): its oldest pending notification, the only one that may be
-- claimed. Kept as a flag (set by the gateway when it writes a delivery, moved by the dispatcher when a
-- head is delivered or dies, both under the order's advisory lock) so that claiming reads only heads:
-- its cost follows the work in flight, not the backlog, and a subscriber with a backlog or an open
-- breaker costs the others nothing.

ALTER TABLE deliveries ADD COLUMN head boolean NOT NULL DEFAULT false;

UPDATE deliveries AS d SET head = true
FROM (SELECT DISTINCT ON (subscription_id, order_id) outbox_id, subscription_id
      FROM deliveries WHERE state = 'pending'
      ORDER BY subscription_id, order_id, position) AS first
WHERE d.outbox_id = first.outbox_id AND d.subscription_id = first.subscription_id;

CREATE INDEX deliveries_heads ON deliveries (subscription_id, next_attempt_at) WHERE state = 'pending' AND head;
