-- Anchors of the decision log's trims (core/audit_anchor.py, nexus/audit/archive.py): where each trimmed chain
-- and the checkpoint chain now start, and the archive segment that holds what left. Written by the remover in the
-- transaction that deletes the rows it anchors, after the segment is on disk.
--
-- kind 'chain': the chain (tenant_id, order_id)'s records before `position` left; `prev_hash` is the last one's
-- hash; `whole` when the chain left with its order. kind 'checkpoints': the checkpoints before the first retained
-- one left; `prev_digest` is the last one's digest. `archive`: the segment's path under NEXUS_AUDIT_ARCHIVE_DIR.

CREATE TABLE audit_anchors (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL CHECK (kind IN ('chain', 'checkpoints')),
    tenant_id   text,
    order_id    text,
    position    integer CHECK (position >= 1),
    prev_hash   bytea CHECK (length(prev_hash) = 32),
    whole       boolean NOT NULL DEFAULT false,
    prev_digest bytea CHECK (length(prev_digest) = 32),
    archive     text NOT NULL,
    CHECK ((kind = 'chain') = (tenant_id IS NOT NULL AND order_id IS NOT NULL AND position IS NOT NULL
                               AND prev_hash IS NOT NULL)),
    CHECK ((kind = 'checkpoints') = (prev_digest IS NOT NULL))
);
CREATE INDEX audit_anchors_chain ON audit_anchors (order_id, tenant_id, position) WHERE kind = 'chain';

-- as the decision log: UPDATE and TRUNCATE refused; DELETE only by the remover (migration 0021)
CREATE TRIGGER audit_anchors_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION nexus_append_only();
