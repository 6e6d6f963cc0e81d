"""Identity, tenancy and outbound safety: principals and API keys, roles, tenants, rate limits,
and the guard that keeps webhooks from being aimed inside. The pure parts (`roles`, `urlguard`,
`ratelimit`) do no I/O; `keys` and `middleware` are the adapters around them (`nexus.outbound` applies the
guard to every outbound connection)."""
