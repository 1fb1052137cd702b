"""Recording into a SQLite history database at HEAD with the standard library's ``sqlite3``.

What an experiment pays for its record (issue 21 item 5, target < 0.2 s; bench/README.md §6)
is mostly SQLAlchemy's import (about 0.25 s CPU). For the default database, a SQLite file that
exists and is at :data:`afbench.history.revision.HEAD`, :func:`record_sqlite` inserts the rows
of :func:`afbench.history.records.extract` itself: the same rows and values SQLAlchemy would
write (values converted by the column types the database declares: ``JSON`` as
``json.dumps``, ``DATETIME`` in SQLAlchemy's SQLite storage format, ``BOOLEAN`` as 0/1), in one
``BEGIN IMMEDIATE`` transaction with the same busy timeout, WAL and foreign keys as
:func:`afbench.history.db.open_db`. Anything else (another dialect, a new file, an older
revision that Alembic must upgrade, a URL with options) returns None, and the caller records
through SQLAlchemy (:func:`afbench.history.records.write`). The host calibration's lookup at
an experiment's start reads the same way (:func:`read_calibration_data`).
tests/test_history_sqlite_record.py holds the two writers to the same stored values.
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from afbench.history.db import BUSY_TIMEOUT_S
from afbench.history.revision import HEAD

#: ``sqlite:///relative`` or ``sqlite:////absolute`` with the default driver and no options.
_PLAIN_SQLITE = re.compile(r"sqlite(?:\+pysqlite)?:///([^?]+)")
#: SQLAlchemy's storage format of ``DateTime`` on SQLite (sqlalchemy.dialects.sqlite.DATETIME).
_DATETIME = "%Y-%m-%d %H:%M:%S.%f"
_TABLES = ("experiments", "records", "runs")


def _value(value: Any, declared: str) -> Any:
    if declared == "JSON":
        return json.dumps(value)
    if declared == "DATETIME" and isinstance(value, datetime):
        return value.strftime(_DATETIME)
    if declared == "BOOLEAN" and value is not None:
        return int(bool(value))
    return value


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any],
            columns: dict[str, str]) -> int:
    unknown = sorted(set(row) - set(columns))
    if unknown:
        raise ValueError(f"history: {table} has no column {', '.join(unknown)}")
    names = list(row)
    cur = conn.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES "
                       f"({', '.join('?' * len(names))})",
                       [_value(row[n], columns[n]) for n in names])
    return int(cur.lastrowid)


def connect_at_head(url: str) -> sqlite3.Connection | None:
    """A connection (autocommit; busy timeout, WAL, foreign keys set) to the SQLite file of
    ``url`` when it is a plain SQLite URL of an existing file at HEAD, else None."""
    match = _PLAIN_SQLITE.fullmatch(url)
    if not match:
        return None
    path = Path(match.group(1)).expanduser()
    if not path.is_file():
        return None  # a new database: SQLAlchemy and Alembic create it
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:  # no alembic_version: not an afbench history yet
        conn.close()
        return None
    except BaseException:
        conn.close()
        raise
    if revision is None or revision[0] != HEAD:
        conn.close()
        return None
    return conn


def read_calibration_data(url: str, host_id: str, run_kind: str) -> tuple[bool, dict | None]:
    """``(True, data)``: the ``data`` of the calibration row of (``host_id``, ``run_kind``)
    in the SQLite file of ``url`` (None when there is no row), read as
    :func:`afbench.history.db.read_calibration` reads it; ``(False, None)`` when ``url`` is not
    a SQLite file at HEAD (read through SQLAlchemy then)."""
    conn = connect_at_head(url)
    if conn is None:
        return False, None
    try:
        row = conn.execute("SELECT data FROM calibration WHERE host_id = ? AND run_kind = ?",
                           (host_id, run_kind)).fetchone()
    finally:
        conn.close()
    if row is None or row[0] is None:
        return True, None
    return True, json.loads(row[0])


def record_sqlite(url: str, ex: Any) -> bool | None:
    """Insert ``ex`` (an :class:`afbench.history.records.Extracted`) into the SQLite file of
    ``url``. True: written; False: its ``out_dir`` was recorded already (also by a concurrent
    writer); None: not a plain SQLite URL of an existing file at HEAD: record through
    SQLAlchemy instead. Raises sqlite3.Error for a file that is not a database or stays locked
    past the busy timeout."""
    conn = connect_at_head(url)
    if conn is None:
        return None
    try:
        columns = {t: {c[1]: str(c[2]).upper() for c in conn.execute(f"PRAGMA table_info({t})")}
                   for t in _TABLES}
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT id FROM experiments WHERE out_dir = ?",
                            (ex.experiment["out_dir"],)).fetchone() is not None:
                conn.execute("ROLLBACK")
                return False
            exp_id = _insert(conn, "experiments", ex.experiment, columns["experiments"])
            for v in ex.variants:
                rec_id = _insert(conn, "records", {"experiment_id": exp_id, **v.record},
                                 columns["records"])
                for run in v.runs:
                    _insert(conn, "runs", {"record_id": rec_id, **run}, columns["runs"])
            conn.execute("COMMIT")
        except sqlite3.IntegrityError:  # the unique out_dir: a concurrent writer got there
            conn.execute("ROLLBACK")
            return False
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return True
    finally:
        conn.close()
