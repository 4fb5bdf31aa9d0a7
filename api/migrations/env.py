"""Alembic environment: ``api.store.migrate`` hands over a connection already inside the transaction
(and, on PostgreSQL, under the advisory lock) that the upgrade runs in. There is no alembic.ini: the
configuration is built in ``api.store.alembic_config``."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
