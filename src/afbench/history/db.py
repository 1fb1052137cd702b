"""Opening the history database: which URL, SQLite settings for concurrent writers, the
Alembic upgrade to the schema's head, and the host calibration hook.

The URL, first found wins: an explicit ``url`` (``--url``, or ``history.url`` of the
experiment's config), ``$AFBENCH_HISTORY_URL``, else the SQLite file
``<platformdirs.user_data_dir("afbench")>/history.sqlite`` (Linux:
``~/.local/share/afbench/history.sqlite``). Any SQLAlchemy URL works
(``postgresql+psycopg://user@host/db`` with ``pip install -e ".[postgres]"``).

SQLite runs in WAL mode with a 30 s busy timeout and ``BEGIN IMMEDIATE`` transactions, so a
sweep's parallel jobs can record at once: a writer waits for the other instead of failing
(SQLite's documented recipe for SQLAlchemy: pysqlite's own transaction handling turned off).
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, select, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from afbench.errors import AfbenchError
from afbench.history.schema import HEAD, calibration

ENV_URL = "AFBENCH_HISTORY_URL"
BUSY_TIMEOUT_S = 30
#: a database server that does not answer within this (seconds) is given up on, and not
#: asked again by this process (psycopg's default waits for the system's TCP timeout, ~130 s)
CONNECT_TIMEOUT_S = 10
_unanswered: dict[str, str] = {}
MIGRATIONS = Path(__file__).parent / "migrations"


class HistoryError(AfbenchError):
    """The history database cannot be opened, upgraded or written (names the URL)."""

    exit_code = 2


class HistoryUnanswered(HistoryError):
    """A database server that did not answer; ``repeated``: this process was told before."""

    def __init__(self, message: str, repeated: bool = False) -> None:
        super().__init__(message)
        self.repeated = repeated


def default_url() -> str:
    """The SQLite file in the per-user data folder (platformdirs ``user_data_dir``)."""
    from platformdirs import user_data_dir

    return f"sqlite:///{Path(user_data_dir('afbench')) / 'history.sqlite'}"


def resolve_url(url: str | None = None) -> str:
    """``url`` if given, else ``$AFBENCH_HISTORY_URL``, else :func:`default_url`."""
    return url or os.environ.get(ENV_URL) or default_url()


def shown(url: str) -> str:
    """The URL with its password hidden, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is named as given: it holds no parsed password
        return url


def _sqlite_settings(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # IMMEDIATE takes the write lock at the start (waiting up to busy_timeout), so two
        # writers never deadlock on upgrading a read lock
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine) -> None:
    """Upgrade the database to :data:`HEAD` through the Alembic chain in ``migrations/``
    (a new database gets every table). Skips Alembic when the database is at HEAD already,
    so recording stays cheap."""
    if _current_revision(engine) == HEAD:
        return
    # Alembic's INFO lines ("setup plugin ..." on import, "Running upgrade ...") would land in
    # the experiment's log: quiet it before it is imported
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic import command
    from alembic.config import Config
    from alembic.util import CommandError

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except CommandError as exc:
        # e.g. a shared database that a newer afbench upgraded: its revision is not in our chain
        raise HistoryError(
            f"history database {engine.url.render_as_string(hide_password=True)}: schema "
            f"revision {_current_revision(engine)!r} is unknown to this afbench (its newest is "
            f"{HEAD!r}; a newer afbench wrote it?): upgrade afbench, or set --url / "
            f"history.url / ${ENV_URL} to another database ({str(exc).splitlines()[0]})"
        ) from None
    except SQLAlchemyError:
        # another process created the tables at the same moment: fine if it got to HEAD
        if _current_revision(engine) != HEAD:
            raise


def _refuse_foreign(engine: Engine, url: str) -> None:
    """For readers: a database without afbench's ``alembic_version`` table (an app's, an empty
    one) is an error, never turned into a history. Disposes the engine's connections."""
    try:
        if _current_revision(engine) is not None:
            return
        with engine.connect() as conn:
            tables = inspect(conn).get_table_names()
    finally:
        engine.dispose()
    held = f"; it holds other tables: {', '.join(tables[:5])}" if tables else ""
    raise HistoryError(
        f"{shown(url)} is not an afbench history database (no alembic_version "
        f"table{held}); run an experiment or `history import` first, or check "
        f"--url (or ${ENV_URL})"
    )


def open_db(url: str | None = None, create: bool = True) -> Engine:
    """An engine on the history database at :func:`resolve_url`'s URL, upgraded to HEAD.

    ``create``: for writers (recording, ``history import``): a SQLite file and its folder are
    created. Readers (``history list | report | check``) pass False: a SQLite file that does
    not exist is an error instead of a new empty database (and folder) at a mistyped path.

    Raises HistoryError naming the URL when it cannot be opened or upgraded (a missing driver,
    a server that does not answer, a file that is not a database), or, with ``create=False``,
    when the SQLite file does not exist or the database holds no afbench history (no
    ``alembic_version``: it is left as it was)."""
    url = resolve_url(url)
    if url in _unanswered:
        raise HistoryUnanswered(_unanswered[url], repeated=True)
    try:
        if url.startswith("sqlite"):
            from sqlalchemy.engine import make_url

            database = make_url(url).database
            if database and database != ":memory:":
                path = Path(database).expanduser()
                if not create and not path.is_file():
                    raise HistoryError(
                        f"no history database at {path}; run an experiment "
                        f"first or check --url (or ${ENV_URL})"
                    )
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
        else:
            server = url.split(":", 1)[0].split("+")[0] in ("postgresql", "mysql", "mariadb")
            engine = create_engine(
                url,
                pool_pre_ping=True,
                connect_args={"connect_timeout": CONNECT_TIMEOUT_S} if server else {},
            )
        if not create:
            _refuse_foreign(engine, url)
        if url.startswith("sqlite"):
            _sqlite_settings(engine)  # after the check: WAL mode is written into the file
        upgrade(engine)
    except OperationalError as exc:
        if url.startswith("sqlite"):
            raise HistoryError(
                f"history database {shown(url)}: {str(exc).splitlines()[0]} "
                f"(set history.url or ${ENV_URL} to a reachable SQLAlchemy "
                "URL)"
            ) from exc
        _unanswered[url] = (
            f"history database {shown(url)} does not answer "
            f"({str(exc.orig or exc).strip().splitlines()[0]}; connect timeout "
            f"{CONNECT_TIMEOUT_S} s): nothing is read from or recorded in it "
            "by this process; the report is written as usual"
        )
        raise HistoryUnanswered(_unanswered[url]) from exc
    except (SQLAlchemyError, ImportError, OSError, ValueError) as exc:
        raise HistoryError(
            f"history database {shown(url)}: {str(exc).splitlines()[0]} "
            f"(set history.url or ${ENV_URL} to a reachable SQLAlchemy URL)"
        ) from exc
    return engine


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


# --- host calibration (issue 21 item 4): the store's side only ----------------------------


def record_calibration(
    engine: Engine,
    host_id: str,
    run_kind: str,
    spread_pct: float,
    n: int,
    data: dict[str, Any] | None = None,
) -> None:
    """Store the run-to-run spread of ``run_kind`` on host ``host_id``, replacing the earlier
    value. The verdict's host calibration is to call this after each multi-round experiment
    (and combine old and new itself: read first with :func:`read_calibration`).

    host_id: :func:`afbench.history.provenance.host_id`; run_kind: the caller's key of
    comparable runs (e.g. ``"<experiment>/<variant>"`` or an engine and workload);
    spread_pct: spread of the log run statistic, percent; n: runs or pairs behind it."""
    row = {
        "host_id": host_id,
        "run_kind": run_kind,
        "spread_pct": float(spread_pct),
        "n": int(n),
        "data": data or {},
        "updated_at": utcnow(),
    }
    with engine.begin() as conn:
        conn.execute(
            calibration.delete().where(
                calibration.c.host_id == host_id, calibration.c.run_kind == run_kind
            )
        )
        conn.execute(calibration.insert().values(**row))


def read_calibration(engine: Engine, host_id: str, run_kind: str) -> dict[str, Any] | None:
    """The stored calibration of ``run_kind`` on ``host_id`` (``spread_pct``, ``n``,
    ``data``, ``updated_at``), None when there is none."""
    with engine.connect() as conn:
        row = conn.execute(
            select(calibration).where(
                calibration.c.host_id == host_id, calibration.c.run_kind == run_kind
            )
        ).first()
    return dict(row._mapping) if row else None


def calibration_rows(engine: Engine, host_id: str | None = None) -> list[dict[str, Any]]:
    """Every stored calibration (of ``host_id`` only when given), ordered by host and kind:
    the rows of :func:`read_calibration` with ``host_id`` and ``run_kind``."""
    q = select(calibration).order_by(calibration.c.host_id, calibration.c.run_kind)
    if host_id is not None:
        q = q.where(calibration.c.host_id == host_id)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def forget_calibration(engine: Engine, host_id: str, run_kind: str) -> bool:
    """Delete the calibration of ``run_kind`` on ``host_id``; False when there was none."""
    with engine.begin() as conn:
        return (
            conn.execute(
                calibration.delete().where(
                    calibration.c.host_id == host_id, calibration.c.run_kind == run_kind
                )
            ).rowcount
            > 0
        )
