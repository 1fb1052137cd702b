"""The history database and contention: each recorded run carries its contention flag
(``runs.contended``, Alembic revision 0002, older databases upgraded and back-filled), ``list``
and ``report`` show it, ``check`` sets contended runs aside and says so; and a database that
does not exist is an error for the readers (list, report, check), created only by writers."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest
from sqlalchemy import text

from afbench.history.__main__ import main
from afbench.history.db import MIGRATIONS, open_db
from afbench.history.records import extract, write
from afbench.history.schema import HEAD
from afbench.store import OutDir
from test_history import FIXTURE_V1, T0, Extracted, planted, url  # noqa: F401 (fixture)

# a window in which a thread of the worker waited for a CPU 40% of the time: contended
CONTENDED = {"scope": "window", "wall_s": 2.0, "run_queue_wait_pct": 40.0, "steal_pct": 0.0}
QUIET = {"scope": "window", "wall_s": 2.0, "run_queue_wait_pct": 1.0, "steal_pct": 0.0}


def _flag(ex: Extracted, contended: bool | None) -> Extracted:
    for v in ex.variants:
        for run in v.runs:
            run["contended"] = contended
    return ex


def _write_all(url: str, *extracted: Extracted) -> None:
    engine = open_db(url)
    for ex in extracted:
        assert write(engine, ex)
    engine.dispose()


@pytest.mark.parametrize(
    "command", [["list"], ["report", "-o", "h.html"], ["check", "--experiment", "x"]]
)
def test_a_reader_of_a_database_that_does_not_exist_says_so_and_creates_nothing(
    tmp_path, capsys, monkeypatch, command
):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "no" / "such" / "dir" / "x.db"
    assert main(["--url", f"sqlite:///{db}", *command]) == 2
    err = capsys.readouterr().err
    assert f"no history database at {db}; run an experiment first or check --url" in err
    assert not (tmp_path / "no").exists()


def test_import_creates_the_database_and_its_folder(tmp_path, capsys):
    db = tmp_path / "new" / "dir" / "h.db"
    assert main(["--url", f"sqlite:///{db}", "import", str(FIXTURE_V1)]) == 0
    assert db.is_file()
    capsys.readouterr()
    assert main(["--url", f"sqlite:///{db}", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4  # plain, fused, plain_copy, broken


def test_each_run_carries_its_contention_flag_and_list_shows_it(url, tmp_path, capsys):
    out = tmp_path / "v1"
    shutil.copytree(FIXTURE_V1, out)
    for run, record in (("fused-train-r1", CONTENDED), ("fused-train-r2", QUIET)):
        path = out / "runs" / run / "result.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "contention": record}))
    ex = extract(OutDir(out))
    fused = next(v for v in ex.variants if v.record["variant"] == "fused")
    assert [(r["run_id"], r["contended"]) for r in fused.runs] == [
        ("fused-train-r1", True),
        ("fused-train-r2", False),
    ]
    assert fused.runs[0]["contention"]["run_queue_wait_pct"] == 40.0
    plain = next(v for v in ex.variants if v.record["variant"] == "plain")
    assert [r["contended"] for r in plain.runs] == [None, None]  # not measured
    _write_all(url, ex)
    assert main(["--url", url, "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "2 run(s) (1 contended)" in next(line for line in lines if "/fused " in line)
    assert "(1 contended)" not in next(line for line in lines if "/plain " in line)
    html = tmp_path / "h.html"
    assert main(["--url", url, "report", "-o", str(html)]) == 0
    assert "| 2 (1 contended) |" in html.with_suffix(".md").read_text()


def _shared_machine_history(url: str) -> None:
    """An experiment at 10 ms, then one at 13 ms on a shared machine (every run contended),
    then the newest at 13 ms on a quiet one: a real 30% slowdown that the contended record
    would hide."""
    _write_all(
        url,
        _flag(planted("gate", T0, 1.0, 1), False),
        _flag(planted("gate", T0 + timedelta(hours=1), 1.3, 2), True),
        _flag(planted("gate", T0 + timedelta(hours=2), 1.3, 3), False),
    )


def test_check_sets_contended_history_runs_aside_and_names_them(url, capsys):
    _shared_machine_history(url)
    assert main(["--url", url, "check", "--experiment", "gate", "--variant", "fused"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("REGRESSION gate/fused:")
    assert "3 run(s) vs 6 run(s) of 2 earlier record(s)" in line
    assert (
        "history run 1 set aside: contended; history run 2 set aside: contended; "
        "history run 3 set aside: contended"
    ) in line
    assert "baseline" not in line
    # kept (a machine that is always shared): contended runs on the history's side only
    # would decide on the contention (issue 34), so no verdict, naming them
    assert (
        main(
            [
                "--url",
                url,
                "check",
                "--experiment",
                "gate",
                "--variant",
                "fused",
                "--contention",
                "keep",
            ]
        )
        == 0
    )
    kept = capsys.readouterr().out
    assert kept.startswith("SKIP gate/fused: no verdict")
    assert "contended on one side only" in kept and "history run 1 set aside: contended" in kept


def test_check_without_an_uncontended_newest_run_gives_no_verdict_and_says_why(url, capsys):
    _write_all(
        url,
        _flag(planted("gate", T0, 1.0, 1), False),
        _flag(planted("gate", T0 + timedelta(hours=1), 1.3, 2), True),
    )
    assert main(["--url", url, "check", "--experiment", "gate", "--variant", "fused"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(
        "SKIP gate/fused: no verdict (no interval: every run of one side was set aside"
    )
    assert "newest run 1 set aside: contended" in line


def test_a_database_of_revision_0001_is_upgraded_and_its_runs_judged(tmp_path):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    db_url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = create_engine(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO experiments (id, out_dir, experiment, created_at, "
                "recorded_at, source) VALUES (1, '/o', 'e', '2026-11-01', "
                "'2026-11-01', 'import')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO records (id, experiment_id, variant, is_baseline) "
                "VALUES (1, 1, 'v', 1)"
            )
        )
        for k, record in ((1, CONTENDED), (2, QUIET), (3, None)):
            conn.execute(
                text(
                    "INSERT INTO runs (id, record_id, run_id, status, contention) "
                    "VALUES (:k, 1, :r, 'OK', :c)"
                ),
                {"k": k, "r": f"v-train-r{k}", "c": json.dumps(record) if record else None},
            )
    engine.dispose()
    engine = open_db(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
        flags = conn.execute(text("SELECT run_id, contended FROM runs ORDER BY id")).all()
    engine.dispose()
    assert [(r, None if c is None else bool(c)) for r, c in flags] == [
        ("v-train-r1", True),
        ("v-train-r2", False),
        ("v-train-r3", None),
    ]


@pytest.mark.parametrize(
    "lang, words",
    [
        (
            "en",
            "history run 6 set aside: an outlier run (far slower than the other runs of its "
            "side); newest run 1 set aside: contended",
        ),
        (
            "zh",
            "历史运行 6 被剔除：是离群运行（远慢于同一侧的其他运行）；最新运行 1 被剔除：受到资源争用",
        ),
    ],
)
def test_runs_set_aside_against_the_history_are_worded_as_history_runs(lang, words):
    from afbench.report.render import verdict_words
    from afbench.store import Speed
    from afbench.verdict import compare_groups

    history = [[0.010] * 5, [0.0102] * 5, [0.0099] * 5, [0.0101] * 5, [0.0100] * 5, [0.03] * 5]
    speed = compare_groups(history, [[0.013] * 5, [0.0131] * 5], newest_contended=[True, False])
    assert str(verdict_words(lang).set_aside_note(Speed.of(speed))) == words
