"""Recording into a SQLite history database at HEAD without SQLAlchemy
(afbench.history.sqlite_record): the rows it stores are the ones SQLAlchemy stores, value for
value; anything it cannot take (a new file, an older revision, another URL) is left to
SQLAlchemy; and an experiment's process records and looks up its calibration without
importing SQLAlchemy."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from afbench.history.db import open_db, record_calibration
from afbench.history.records import extract, write
from afbench.history.sqlite_record import read_calibration_data, record_sqlite
from afbench.store import OutDir

FIXTURE_V1 = Path(__file__).parent / "fixtures" / "results" / "v1"
CONTENDED = {"scope": "window", "wall_s": 2.0, "run_queue_wait_pct": 40.0, "steal_pct": 0.0}
# ids and the row's own identity differ between two recordings; every other value must not
SKIP = {"id", "experiment_id", "record_id", "out_dir", "recorded_at", "report_path"}


def _copy(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    shutil.copytree(FIXTURE_V1, out)
    path = out / "runs" / "fused-train-r1" / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "contention": CONTENDED}))
    return out


def _stored(db: Path, out_dir: Path) -> list[tuple[str, dict]]:
    """Every row of the experiment recorded from ``out_dir``, as SQLite holds it."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    (exp,) = conn.execute("SELECT * FROM experiments WHERE out_dir = ?", (str(out_dir),))
    rows = [("experiments", dict(exp))]
    for rec in conn.execute("SELECT * FROM records WHERE experiment_id = ? ORDER BY id",
                            (exp["id"],)).fetchall():
        rows.append(("records", dict(rec)))
        rows += [("runs", dict(r)) for r in conn.execute(
            "SELECT * FROM runs WHERE record_id = ? ORDER BY id", (rec["id"],))]
    conn.close()
    return [(t, {k: v for k, v in r.items() if k not in SKIP}) for t, r in rows]


def test_the_standard_library_stores_what_sqlalchemy_stores(tmp_path):
    db = tmp_path / "h.sqlite"
    url = f"sqlite:///{db}"
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    engine = open_db(url)
    assert write(engine, extract(OutDir(a)))
    engine.dispose()
    ex = extract(OutDir(b))
    ex.experiment["recorded_at"] = ex.experiment["recorded_at"].replace(microsecond=123456)
    assert record_sqlite(url, ex) is True
    assert record_sqlite(url, ex) is False  # recorded already: nothing written twice
    via_sqlalchemy, via_sqlite3 = _stored(db, a), _stored(db, b)
    assert len(via_sqlite3) == 1 + 4 + 8  # the experiment, 4 variants, 8 verdict-phase runs
    assert via_sqlite3 == via_sqlalchemy
    # and SQLAlchemy reads them back as it wrote them (times, JSON, booleans)
    from sqlalchemy import select

    from afbench.history.schema import experiments, runs
    engine = open_db(url)
    with engine.connect() as conn:
        times = conn.execute(select(experiments.c.recorded_at)
                             .where(experiments.c.out_dir == str(b))).scalar()
        flags = sorted(conn.execute(select(runs.c.run_id, runs.c.contended, runs.c.contention)
                                    .where(runs.c.contended.is_(True))).all())
    engine.dispose()
    assert times == ex.experiment["recorded_at"]
    assert [(r, c, d["run_queue_wait_pct"]) for r, c, d in flags] == [
        ("fused-train-r1", True, 40.0), ("fused-train-r1", True, 40.0)]


def test_what_it_cannot_take_is_left_to_sqlalchemy(tmp_path):
    ex = extract(OutDir(_copy(tmp_path, "a")))
    new = tmp_path / "new.sqlite"
    assert record_sqlite(f"sqlite:///{new}", ex) is None and not new.exists()
    assert record_sqlite(f"sqlite:///{tmp_path / 'x.sqlite'}?timeout=5", ex) is None
    assert record_sqlite("postgresql+psycopg://u@h/db", ex) is None
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old)
    conn.executescript("CREATE TABLE alembic_version (version_num TEXT);"
                       "INSERT INTO alembic_version VALUES ('0001');")
    conn.close()
    assert record_sqlite(f"sqlite:///{old}", ex) is None  # Alembic upgrades it first
    assert read_calibration_data(f"sqlite:///{old}", "h", "k") == (False, None)


def test_the_calibration_is_read_as_sqlalchemy_reads_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    engine = open_db(url)
    record_calibration(engine, "h1", "kind", 3.0, 12, {"estimates": [{"spread_pct": 3.0}]})
    engine.dispose()
    assert read_calibration_data(url, "h1", "kind") == (True, {"estimates": [{"spread_pct": 3.0}]})
    assert read_calibration_data(url, "h1", "other") == (True, None)


def test_an_experiment_process_records_without_importing_sqlalchemy(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    open_db(url).dispose()  # the database exists, at HEAD
    out = _copy(tmp_path, "a")
    code = ("import sys; from afbench.history import record_experiment; "
            "from afbench.history.calibration import lookup; "
            f"print(lookup('k', {url!r}), record_experiment({str(out)!r}, {url!r}), "
            "'sqlalchemy' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["None", "True", "False"]
