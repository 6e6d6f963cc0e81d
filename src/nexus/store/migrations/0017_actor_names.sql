-- The name of the API key a decision-log record's actor `key:<id>` stands for: a label kept beside the
-- record, outside its hash (core/audit_chain.py), so records written before it (NULL here) verify as they did.

ALTER TABLE decision_log ADD COLUMN actor_name text;
