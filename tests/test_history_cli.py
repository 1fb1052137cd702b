"""The history command line on bad input: each mistake is one line naming what is wrong and
what to do, exit 2, no traceback, and nothing written (a database that a newer afbench
upgraded)."""

from __future__ import annotations

from sqlalchemy import create_engine, text

from afbench.history.__main__ import main
from afbench.history.db import open_db


def test_a_database_of_a_newer_afbench_is_named_not_a_traceback(tmp_path, capsys):
    path = tmp_path / "h.sqlite"
    db = f"sqlite:///{path}"
    open_db(db).dispose()
    engine = create_engine(db)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    before = path.read_bytes()
    assert main(["--url", db, "list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "revision '9999' is unknown to this afbench" in err
    assert "upgrade afbench" in err and path.read_bytes() == before
