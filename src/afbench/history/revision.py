"""The Alembic revision that :mod:`afbench.history.schema`'s tables are (its migration chain is
``migrations/versions/``). Imports nothing: recording into a SQLite database that is at this
revision needs no SQLAlchemy (:mod:`afbench.history.sqlite_record`)."""

#: The database is upgraded to this revision when it is opened (afbench.history.db.open_db).
HEAD = "0002"
