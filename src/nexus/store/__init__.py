"""PostgreSQL adapter: embedded server, connection pool, migrations, named queries, error mapping."""
