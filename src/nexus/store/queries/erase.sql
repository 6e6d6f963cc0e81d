-- Erasing a tenant (`nexus tenants erase`, nexus.audit.erase): found from the catalog, so a table added later
-- is erased too without a line here.

-- name: tenant_tables
-- Every table of the gateway's schema with a tenant_id column, but the erasure records themselves.
SELECT c.relname AS table_name
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema() AND c.relname <> 'audit_erasures'
ORDER BY c.relname;

-- name: dependent_tables
-- Tables without a tenant_id whose foreign keys point at a table with one: (child, its columns, parent, the
-- parent's columns). Their rows of an erased tenant's parents go first.
SELECT child.relname AS child, parent.relname AS parent,
       array(SELECT attname FROM pg_attribute WHERE attrelid = con.conrelid AND attnum = ANY (con.conkey)
             ORDER BY array_position(con.conkey, attnum))::text[] AS child_columns,
       array(SELECT attname FROM pg_attribute WHERE attrelid = con.confrelid AND attnum = ANY (con.confkey)
             ORDER BY array_position(con.confkey, attnum))::text[] AS parent_columns
FROM pg_constraint con
JOIN pg_class child ON child.oid = con.conrelid
JOIN pg_class parent ON parent.oid = con.confrelid
JOIN pg_namespace n ON n.oid = child.relnamespace
WHERE con.contype = 'f' AND n.nspname = current_schema()
  AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = child.oid AND a.attname = 'tenant_id'
                  AND NOT a.attisdropped)
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = parent.oid AND a.attname = 'tenant_id'
              AND NOT a.attisdropped)
ORDER BY child.relname;

-- name: revoke_tenant_keys
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE tenant_id = $1 RETURNING id;

-- name: tenant_heads
-- The last (position, hash) of each of the tenant's chains, those archived by a trim included (an anchor's
-- position - 1 and previous hash: the anchors leave with the tenant, the erasure record then covers them).
SELECT DISTINCT ON (order_id) tenant_id, order_id, position, hash
FROM (
    SELECT tenant_id, order_id, position, hash FROM decision_log WHERE tenant_id = $1
    UNION ALL
    SELECT tenant_id, order_id, position - 1, prev_hash FROM audit_anchors
    WHERE kind = 'chain' AND tenant_id = $1 AND position > 1
) AS heads
ORDER BY order_id, position DESC;

-- name: insert_erasure
INSERT INTO audit_erasures (at, tenant_id, heads, digest, signature, key_id, public_key)
VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7)
RETURNING id;

-- name: erasures
SELECT id, at, tenant_id, heads::text AS heads, digest, signature, key_id, public_key
FROM audit_erasures ORDER BY id;
