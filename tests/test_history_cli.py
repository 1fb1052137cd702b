"""The history command line on bad input: each mistake is one line naming what is wrong and
what to do, exit 2, no traceback, and nothing written (a date with an offset, an unknown
experiment for ``list``, a ``report -o`` that cannot be written, a database that a newer
afbench upgraded, another program's database given to a reader); and a report of too few records
says change points were not looked for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import create_engine, inspect, text

from afbench.history.__main__ import main
from afbench.history.db import open_db
from afbench.history.records import write
from support.history import copy_experiment
from test_history import T0, planted, url  # noqa: F401 (fixture)


def _write_all(url: str, *extracted) -> None:
    engine = open_db(url)
    for ex in extracted:
        assert write(engine, ex)
    engine.dispose()


def test_since_converts_an_offset_to_utc_and_names_a_bad_date(url, capsys):
    _write_all(url, planted("gate", T0, 1.0, 1), planted("gate", T0 + timedelta(hours=2), 1.0, 2))
    # 11:00+02:00 is 09:00 UTC: only the record of 10:00 UTC is on or after it
    assert main(["--url", url, "list", "--since", "2026-11-01T11:00+02:00"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("2026-11-01 10:00:00") for line in lines)
    with pytest.raises(SystemExit) as exc:
        main(["--url", url, "list", "--since", "yesterday"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'yesterday' is not an ISO date" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        main(["--url", url, "list", "--limit", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:  # `--url "$UNSET"`: not the default database
        main(["--url", "", "list"])
    assert exc.value.code == 2 and "--url: is empty" in capsys.readouterr().err


def test_list_names_an_unknown_experiment_like_check_and_report(url, capsys):
    _write_all(url, planted("gate", T0, 1.0, 1))
    assert main(["--url", url, "list", "--experiment", "gaet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "did you mean gate?" in captured.err
    assert main(["--url", url, "check", "--experiment", "gate", "--variant", "fsued"]) == 2
    err = capsys.readouterr().err
    assert "no record of variant 'fsued' of gate" in err and "recorded: base, fused" in err


def test_report_to_a_place_it_cannot_write_is_one_line_and_exit_2(url, tmp_path, capsys):
    _write_all(url, planted("gate", T0, 1.0, 1))
    folder = tmp_path / "taken.html"
    folder.mkdir()
    assert main(["--url", url, "report", "-o", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot write {folder}" in err and "-o" in err
    assert list(folder.iterdir()) == [] and not (tmp_path / "taken.md").exists()


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


def test_a_report_of_three_records_says_change_points_were_not_looked_for(url, tmp_path, capsys):
    # the docs/history.md's gate: two equal records, then one 30% slower; PELT needs 4 records to look
    _write_all(
        url,
        *(planted("gate", T0 + timedelta(hours=k), 1.3 if k == 2 else 1.0, k) for k in range(3)),
    )
    out = tmp_path / "h.html"
    assert main(["--url", url, "report", "-o", str(out)]) == 0
    md = out.with_suffix(".md").read_text()
    assert "No change point found" not in md
    assert (
        md.count(
            "No change point looked for: it needs 4 or more records of one host "
            "and config (here 3 with a step time)."
        )
        == 2
    )  # base and fused
    assert "No change point looked for" in out.read_text()


def test_a_reader_leaves_a_database_without_afbench_history_as_it_was(url, capsys):
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE app_users (id INTEGER)"))
    path = url.startswith("sqlite") and url.split("///", 1)[1]
    before = open(path, "rb").read() if path else None
    for command in (
        ["list"],
        ["report", "-o", "/nonexistent/h.html"],
        ["check", "--experiment", "gate"],
    ):
        assert main(["--url", url, *command]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not an afbench history database" in err
        assert "app_users" in err
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == ["app_users"]
    engine.dispose()
    if path:
        assert open(path, "rb").read() == before  # not even switched to WAL


def test_importing_only_missing_directories_is_a_usage_error_that_creates_nothing(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    assert main(["--url", f"sqlite:///{db}", "import", str(tmp_path / "nope")]) == 2
    assert "nope: no such directory" in capsys.readouterr().err
    assert not db.exists()


def test_importing_a_folder_without_experiments_creates_no_database(tmp_path, capsys):
    db, empty = tmp_path / "h.sqlite", tmp_path / "empty"
    empty.mkdir()
    assert main(["--url", f"sqlite:///{db}", "import", str(empty)]) == 1
    assert "no finished experiment" in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.parametrize(
    "damage, key, message",
    [
        ({"spread_pct": "3.0"}, "calibration.spread_pct", "Input should be a valid number"),
        ({"n_pairs": True}, "calibration.n_pairs", "Input should be a valid integer"),
        (
            {"baseline_runs": {"step_s": 0.25, "n_runs": True, "spread_pct": 3.0, "df": 23}},
            "calibration.baseline_runs.n_runs",
            "Input should be a valid integer",
        ),
        ({"spread_pct": -1.0}, "calibration.spread_pct", "Input should be greater than 0"),
        ({"df": 0}, "calibration.df", "Input should be greater than or equal to 1"),
    ],
)
def test_import_skips_a_directory_whose_calibration_was_hand_edited_and_records_the_rest(
    url, tmp_path, capsys, damage, key, message
):
    import json
    import shutil

    from test_history import FIXTURE_V1

    calibration = {"kind": "k", "host_id": "h", "spread_pct": 3.0, "df": 23, "n_pairs": 24}
    earlier, results = tmp_path / "earlier", tmp_path / "results"
    shutil.copytree(FIXTURE_V1, earlier)
    assert main(["--url", url, "import", str(earlier)]) == 0
    good, bad = results / "a_good", results / "b_edited"
    for out, cal in ((good, calibration), (bad, {**calibration, **damage})):
        copy_experiment(FIXTURE_V1, out, "2026-12-02T08:00")
        exp = json.loads((out / "experiment.json").read_text())
        (out / "experiment.json").write_text(json.dumps({**exp, "calibration": cal}))
    capsys.readouterr()
    assert main(["--url", url, "import", str(results)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"history import: {bad / 'experiment.json'}: {key}: {message}; {bad} not recorded "
        "(correct or restore that file, then import it again)"
    ]
    assert "history import: 1 recorded, 0 already recorded, 1 unreadable" in captured.out
    engine = open_db(url)
    with engine.connect() as conn:
        recorded = set(conn.execute(text("SELECT out_dir FROM experiments")).scalars())
    engine.dispose()
    assert recorded == {str(earlier.resolve()), str(good.resolve())}  # nothing lost, bad left out


def test_the_gate_warns_once_when_the_newest_experiments_calibration_is_damaged(tmp_path, caplog):
    """history check reads the newest experiment's calibration from its experiment.json: a
    damaged one is named in a warning and not used; a moved directory gives none, silently."""
    import json
    import logging
    import shutil

    from afbench.history.check import _calibration
    from test_history import FIXTURE_V1

    out = tmp_path / "edited"
    shutil.copytree(FIXTURE_V1, out)
    exp = json.loads((out / "experiment.json").read_text())
    (out / "experiment.json").write_text(
        json.dumps(
            {
                **exp,
                "calibration": {
                    "kind": "k",
                    "host_id": "h",
                    "spread_pct": -3.0,
                    "df": 23,
                    "n_pairs": 24,
                },
            }
        )
    )
    with caplog.at_level(logging.WARNING):
        assert _calibration(str(out)) is None
        assert _calibration(str(tmp_path / "moved")) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "calibration.spread_pct" in warnings[0]
    assert str(out / "experiment.json") in warnings[0] and "not used" in warnings[0]
