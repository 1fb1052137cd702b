"""Alembic environment of the history database: run by :func:`afbench.history.db.upgrade`
with an open connection in ``config.attributes["connection"]`` (online mode only)."""

from alembic import context

from afbench.history.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
