-- A tenant's own `max_list_items` (core/list_limits.py): the most items any list of a step's data may
-- hold, lowering its process's limit (never raising it: the process's rules were judged for cost against
-- that one). NULL: the process's limit alone.

ALTER TABLE tenant_limits ADD COLUMN max_list_items integer CHECK (max_list_items > 0);
