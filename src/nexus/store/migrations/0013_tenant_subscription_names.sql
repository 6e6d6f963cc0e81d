-- Subscription names are unique per tenant, not across tenants: a 409 on another tenant's name told a
-- tenant that the name existed (an existence oracle). The subscriptions spanning every tenant (tenant_id
-- NULL, an operator's) are a namespace of their own: NULL is indexed as '*', which no tenant can be
-- (tenants are identifiers, and '*' is how the API writes "every tenant").

ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_name_key;

CREATE UNIQUE INDEX subscriptions_tenant_name ON subscriptions ((coalesce(tenant_id, '*')), name);
