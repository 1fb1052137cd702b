"""The history database (afbench.history) on SQLite and, where a server is given
(AFBENCH_TEST_PG_URL, started by .ci/run with .ci/pg_start), on PostgreSQL: recording,
import, list, the regression gate, the trend report, change points. Records with planted
step times are written directly (nothing is timed); tests/test_history_e2e.py runs afbench."""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from afbench.history import record_experiment
from afbench.history.__main__ import main
from afbench.history.check import compare_history
from afbench.history.db import open_db, read_calibration
from afbench.history.records import Extracted, VariantRows, extract, write
from afbench.history.schema import HEAD
from afbench.history.trend import change_points
from afbench.store import OutDir
from support.history import copy_experiment

FIXTURE_V1 = Path(__file__).parent / "fixtures" / "results" / "v1"
T0 = datetime(2026, 11, 1, 8, 0)


def _pg_server() -> str | None:
    return os.environ.get("AFBENCH_TEST_PG_URL")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A fresh, empty database URL: a SQLite file, or a new database on the PostgreSQL
    server of AFBENCH_TEST_PG_URL (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'h.sqlite'}"
        return
    server = _pg_server()
    if not server:
        pytest.skip(
            "no PostgreSQL server: set AFBENCH_TEST_PG_URL (.ci/run starts one with .ci/pg_start)"
        )
    try:
        admin = create_engine(server, isolation_level="AUTOCOMMIT")
        name = f"afbench_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server is a skip
        pytest.skip(f"PostgreSQL at AFBENCH_TEST_PG_URL not reachable: {exc}")
    yield server.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def planted(
    experiment: str,
    when: datetime,
    factor: float,
    seed: int,
    *,
    host: str = "h1",
    versions: dict | None = None,
    runs: int = 3,
    steps: int = 8,
) -> Extracted:
    """The rows of one experiment with variants base and fused, step times 10 ms x factor
    x 3% lognormal noise (seeded), as records.extract would give them."""
    rng = random.Random(seed)
    exp = {
        "out_dir": f"/planted/{experiment}/{seed}",
        "experiment": experiment,
        "created_at": when,
        "recorded_at": when,
        "source": "import",
        "baseline": "base",
        "verdict_phase": "train",
        "repeats": str(runs),
        "n_runs": 2 * runs,
        "n_failed": 0,
        "versions": versions or {"torch": "2.13.0"},
        "host_id": host,
        "git_commit": f"{seed:040x}",
    }
    variants = []
    for name in ("base", "fused"):
        run_rows = []
        for k in range(runs):
            times = [0.01 * factor * rng.lognormvariate(0, 0.03) for _ in range(steps)]
            run_rows.append(
                {
                    "run_id": f"{name}-train-r{k + 1}",
                    "repeat": k + 1,
                    "status": "OK",
                    "median_step_s": sorted(times)[steps // 2],
                    "mean_step_s": sum(times) / steps,
                    "n_steps": steps,
                    "step_times_s": times,
                }
            )
        med = sorted(r["median_step_s"] for r in run_rows)[runs // 2]
        variants.append(
            VariantRows(
                {
                    "variant": name,
                    "is_baseline": name == "base",
                    "config_hash": f"cfg-{name}",
                    "verdict": "BASELINE" if name == "base" else "NO_GAIN",
                    "gain_pct": None if name == "base" else 0.5,
                    "ci_low_pct": None if name == "base" else -1.0,
                    "ci_high_pct": None if name == "base" else 1.5,
                    "decision": None if name == "base" else "NO_GAIN",
                    "median_step_s": med,
                    "n_runs_ok": runs,
                    "report_path": f"/planted/{experiment}/{seed}/report.html",
                },
                run_rows,
            )
        )
    return Extracted(exp, variants)


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def test_a_new_database_is_migrated_to_the_alembic_head(url):
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from afbench.history.db import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD
    engine = open_db(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
    open_db(url).dispose()  # a second open finds HEAD and changes nothing
    engine.dispose()


def test_import_records_every_variant_once_and_leaves_the_directory_unchanged(
    url, tmp_path, capsys
):
    out = tmp_path / "v1"
    shutil.copytree(FIXTURE_V1, out)
    before = _tree_digest(out)
    assert main(["--url", url, "import", str(tmp_path)]) == 0
    assert "1 recorded" in capsys.readouterr().out
    assert main(["--url", url, "import", str(out)]) == 0
    assert "0 recorded, 1 already recorded" in capsys.readouterr().out
    assert _tree_digest(out) == before
    assert main(["--url", url, "list", "--experiment", "fixture_results"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # plain, fused, plain_copy, broken
    fused = next(line for line in lines if "fixture_results/fused " in line)
    assert "gain +" in fused and "2 run(s)" in fused and str(out) in fused
    broken = next(line for line in lines if "/broken " in line)
    assert "0 run(s)" in broken and "RUN_FAILED" in broken


def test_a_copied_output_directory_is_the_experiment_recorded_once(url, tmp_path, capsys):
    """issue 34: an experiment is keyed by what identifies it (name, host, start, sweep job),
    not by where its directory lies: a copy is already recorded."""
    shutil.copytree(FIXTURE_V1, tmp_path / "a" / "v1")
    shutil.copytree(FIXTURE_V1, tmp_path / "b" / "v1")
    assert main(["--url", url, "import", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "1 recorded, 1 already recorded" in capsys.readouterr().out
    copy_experiment(FIXTURE_V1, tmp_path / "c", "2026-12-03T08:00")  # another experiment
    assert main(["--url", url, "import", str(tmp_path / "c")]) == 0
    assert "1 recorded" in capsys.readouterr().out


def test_a_resumed_experiment_records_only_the_runs_it_ran(url, tmp_path):
    """issue 34: a resumed experiment copies its earlier runs (status 'resumed from <run
    dir>'); recorded again, history check counted them twice."""
    import json

    first = shutil.copytree(FIXTURE_V1, tmp_path / "first")
    resumed = copy_experiment(FIXTURE_V1, tmp_path / "resumed", "2026-12-03T08:00")
    status = resumed / "runs" / "plain-train-r1" / "status.json"
    reused = f"resumed from {first.resolve() / 'runs' / 'plain-train-r1'}"
    status.write_text(json.dumps({**json.loads(status.read_text()), "reason": reused}))
    assert main(["--url", url, "import", str(first)]) == 0
    assert main(["--url", url, "import", str(resumed)]) == 0
    engine = create_engine(url)
    with engine.connect() as conn:
        counted = conn.execute(
            text(
                "SELECT e.out_dir, count(*) FROM runs r JOIN records c ON r.record_id = c.id "
                "JOIN experiments e ON c.experiment_id = e.id WHERE r.run_id = 'plain-train-r1' "
                "GROUP BY e.out_dir"
            )
        ).all()
    engine.dispose()
    assert counted == [(str(first.resolve()), 1)]


def test_importing_a_folder_that_does_not_exist_yet_beside_others_is_a_note(url, tmp_path, capsys):
    """issue 34: `history import outputs/ multirun/` as the README writes it exited 1 before
    the first sweep made multirun/."""
    outputs = tmp_path / "outputs"
    shutil.copytree(FIXTURE_V1, outputs / "v1")
    assert main(["--url", url, "import", str(outputs), str(tmp_path / "multirun")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'multirun'}: no such directory (yet): skipped" in out
    assert "1 recorded" in out


def test_extract_keeps_per_run_step_times_of_the_measured_window():
    ex = extract(OutDir(FIXTURE_V1))
    plain = next(v for v in ex.variants if v.record["variant"] == "plain")
    assert plain.record["is_baseline"] and plain.record["verdict"] == "BASELINE"
    assert [r["run_id"] for r in plain.runs] == ["plain-train-r1", "plain-train-r2"]
    assert all(r["status"] == "OK" and r["n_steps"] == 4 for r in plain.runs)  # steps 3..6
    assert plain.runs[0]["step_times_s"] and plain.runs[0]["contention"] is None
    fused = next(v for v in ex.variants if v.record["variant"] == "fused")
    assert fused.record["switches"]["add_rmsnorm"] is True
    assert fused.record["decision"] == "FASTER" and fused.record["n_pairs"] == 2
    assert ex.experiment["repeats"] == "2" and ex.experiment["n_failed"] >= 1


def test_an_unreachable_database_is_a_warning_and_the_experiment_goes_on(tmp_path, caplog):
    out = tmp_path / "v1"
    shutil.copytree(FIXTURE_V1, out)
    assert record_experiment(out, "postgresql+psycopg://nobody@127.0.0.1:1/none") is False
    assert "was not recorded" in caplog.text and "127.0.0.1" in caplog.text
    assert record_experiment(out, "nosuchdialect://x") is False
    assert record_experiment(out, f"sqlite:///{tmp_path / 'h.sqlite'}") is True
    assert record_experiment(out, f"sqlite:///{tmp_path / 'h.sqlite'}") is False  # once only


def _record_copy(args: tuple[str, str]) -> bool:
    out, url = args
    return record_experiment(Path(out), url)


def test_parallel_writers_to_one_sqlite_file_all_land(tmp_path):
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    outs = []
    for k in range(4):  # four experiments (each its own start), recorded once each
        outs.append(copy_experiment(FIXTURE_V1, tmp_path / f"job{k}", f"2026-12-0{k + 1}T08:00"))
    with multiprocessing.get_context("fork").Pool(4) as pool:
        # each job twice, at once: every directory is recorded exactly once
        done = pool.map(_record_copy, [(str(o), url) for o in outs * 2])
    assert sum(done) == 4
    engine = open_db(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM experiments")).scalar() == 4
        assert conn.execute(text("SELECT count(*) FROM records")).scalar() == 16
    engine.dispose()


def _write_all(url: str, *extracted: Extracted) -> None:
    engine = open_db(url)
    for ex in extracted:
        assert write(engine, ex)
    engine.dispose()


def test_check_exits_1_on_a_planted_30pct_slowdown_and_names_it(url, capsys):
    _write_all(
        url,
        planted("gate", T0, 1.0, 1),
        planted("gate", T0 + timedelta(hours=1), 1.3, 2, versions={"torch": "2.14.0"}),
    )
    assert main(["--url", url, "check", "--experiment", "gate", "--variant", "fused"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("REGRESSION gate/fused:")
    slower = float(line.split(": ")[1].split("%")[0])
    assert 25 < slower < 35
    assert "now torch 2.14.0" in line and "before torch 2.13.0" in line


def test_check_exits_0_without_a_slowdown(url, capsys):
    _write_all(url, planted("gate", T0, 1.0, 1), planted("gate", T0 + timedelta(hours=1), 1.0, 2))
    assert main(["--url", url, "check", "--experiment", "gate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("OK gate/") for line in lines)


def test_check_fails_a_newest_record_whose_runs_failed_and_passes_one_a_backend_skipped(
    url, capsys
):
    """A switch that crashes every run must not pass the gate as "nothing measured"."""
    newest = planted("gate", T0 + timedelta(hours=1), 1.0, 2)
    for v in newest.variants:
        for r in v.runs:
            r.update(
                status="FAILED" if v.record["variant"] == "fused" else "SKIPPED",
                step_times_s=None,
                median_step_s=None,
                mean_step_s=None,
            )
    _write_all(url, planted("gate", T0, 1.0, 1), newest)
    assert main(["--url", url, "check", "--experiment", "gate"]) == 1
    lines = capsys.readouterr().out.splitlines()
    fused = next(line for line in lines if "gate/fused" in line)
    assert fused.startswith(
        "FAILED gate/fused: the newest record (/planted/gate/2) has no "
        "measured run: 3 run(s) failed (fused-train-r1, fused-train-r2, "
        "fused-train-r3)"
    ), fused
    assert next(line for line in lines if "gate/base" in line).startswith("SKIP gate/base:")


def test_check_compares_only_the_same_host_and_names_an_unknown_experiment(url, capsys):
    _write_all(
        url,
        planted("gate", T0, 1.0, 1, host="other"),
        planted("gate", T0 + timedelta(hours=1), 1.3, 2),
    )
    assert main(["--url", url, "check", "--experiment", "gate"]) == 0
    assert "no earlier record" in capsys.readouterr().out
    assert main(["--url", url, "check", "--experiment", "gaet"]) == 2
    assert "did you mean gate?" in capsys.readouterr().err


def test_compare_history_needs_a_spread_for_one_run_a_side_and_takes_the_calibration():
    rng = random.Random(5)
    old = [[0.01 * rng.lognormvariate(0, 0.03) for _ in range(10)]]
    new = [[0.013 * rng.lognormvariate(0, 0.03) for _ in range(10)]]
    blind = compare_history(old, new)  # steps cannot show how whole runs move between days
    assert blind.decision == "INCONCLUSIVE" and blind.no_interval_reason == "uncalibrated"
    calibration = {"spread_pct": 5.0, "df": 23, "n_pairs": 24}
    speed = compare_history(old, new, calibration=calibration)
    assert speed.decision == "SLOWER" and speed.calibration == calibration
    assert speed.ci_low_pct < speed.gain_pct < speed.ci_high_pct < 0
    # against five earlier runs: the newest run is judged by the history's own spread
    history = [
        [0.01 * rng.lognormvariate(0, 0.03) * rng.lognormvariate(0, 0.02) for _ in range(10)]
        for _ in range(5)
    ]
    assert compare_history(history, new).decision == "SLOWER"
    with pytest.raises(ValueError, match="history"):
        compare_history([[0.0, 1.0]], new)


def test_change_points_find_a_step_and_not_noise():
    rng = random.Random(3)
    flat = [0.01 * rng.lognormvariate(0, 0.03) for _ in range(20)]
    assert change_points(flat) == []
    step = flat[:10] + [t * 1.2 for t in flat[10:]]
    assert change_points(step) == [10]
    assert change_points([0.01, 0.02]) == []


def test_report_shows_every_record_with_trend_plots_links_and_the_change(url, tmp_path, capsys):
    recs = [
        planted(
            "trend",
            T0 + timedelta(hours=k),
            1.0 if k < 5 else 1.25,
            k,
            versions={"torch": "2.13.0" if k < 5 else "2.14.0"},
        )
        for k in range(10)
    ]
    _write_all(url, *recs)
    out = tmp_path / "rep" / "history.html"
    assert main(["--url", url, "report", "--experiment", "trend", "-o", str(out)]) == 0
    page = out.read_text()
    assert page.count("<svg") == 3  # base step time; fused step time and gain
    # every point links its record's report, relative to the page; every table row too
    assert len(re.findall(r'<a xlink:href="(?:\.\./)+planted/trend/\d+/report.html"', page)) == 30
    assert len(re.findall(r'<a href="(?:\.\./)+planted/trend/\d+/report.html"', page)) == 20
    assert (
        "between 2026-11-01 12:00 (torch 2.13.0" in page
        and "and 2026-11-01 13:00 (torch 2.14.0" in page
    )
    md = out.with_suffix(".md").read_text()
    assert md.count("| 2026-11-01") == 20 and "step time +2" in md


def test_the_host_calibration_is_kept_in_the_history_database(url, tmp_path):
    from afbench.history import calibration as cal
    from afbench.verdict.calibration import RunSpread

    kind = "cpu|builtin|sft|qwen3_tiny|seq256|gbs4|window5"
    assert cal.lookup(kind, url) is None
    assert cal.record(kind, RunSpread(spread_pct=3.0, df=11, n_pairs=12), "/out/aa", cal.AA, url)
    assert cal.record(
        kind, RunSpread(spread_pct=4.0, df=2, n_pairs=3), "/out/x", cal.RESIDUALS, url
    )
    again = cal.record(
        kind, RunSpread(spread_pct=4.0, df=2, n_pairs=3), "/out/x", cal.RESIDUALS, url
    )  # a re-render records nothing twice
    assert (again.n_pairs, again.df) == (15, 13)
    got = cal.lookup(kind, url)
    assert (got["df"], got["n_pairs"], got["n_experiments"]) == (13, 15, 2)
    assert got["spread_pct"] == pytest.approx(((11 * 9 + 2 * 16) / 13) ** 0.5)
    row = read_calibration(open_db(url), got["host_id"], kind)  # SQL readers see the pooled
    assert row["n"] == 15 and row["spread_pct"] == pytest.approx(got["spread_pct"])


def test_the_history_cli_does_not_import_torch(tmp_path):
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    code = (
        "import sys; from afbench.history.__main__ import main; "
        f"main(['--url', {url!r}, 'import', {str(FIXTURE_V1)!r}]); "
        f"main(['--url', {url!r}, 'report', '-o', {str(tmp_path / 'r.html')!r}]); "
        f"main(['--url', {url!r}, 'check', '--experiment', 'fixture_results']); "
        "print('TORCH', 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TORCH False" in proc.stdout


def test_a_sweep_job_is_one_series_per_swept_setting(tmp_path):
    sweep = tmp_path / "multirun" / "sweep"
    for job, value in (("0", "False"), ("1", "True")):
        shutil.copytree(FIXTURE_V1, sweep / job)
        (sweep / job / ".hydra").mkdir(exist_ok=True)
        (sweep / job / ".hydra" / "overrides.yaml").write_text(
            f"- experiment=fixture_results\n- optimization.autofuse={value}\n- seed=1\n"
        )
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - experiment=fixture_results\n"
        "    - optimization.autofuse=false,true\n    - seed=1\n"
    )
    ex = extract(OutDir(sweep / "1"))
    assert ex.experiment["sweep_dir"] == str(sweep) and ex.experiment["job"] == "1"
    assert ex.variants[0].record["variant"] == "plain [optimization.autofuse=true]"


def test_history_url_is_a_config_key_whose_password_never_reaches_experiment_json(compose_cfg):
    from afbench.config import validate_config

    conf = validate_config(compose_cfg("history.url=postgresql+psycopg://bob:s3cret@db/afb"))
    assert conf.history.url == "postgresql+psycopg://bob:s3cret@db/afb" and conf.history.record
    dumped = conf.model_dump(mode="json")["history"]["url"]
    assert dumped == "postgresql+psycopg://bob:***@db/afb"


def test_a_directory_of_schema_version_0_is_recorded_too():
    ex = extract(OutDir(FIXTURE_V1.parent / "v0"))
    rows = {v.record["variant"]: v for v in ex.variants}
    assert rows["fused"].record["verdict"] == "FUSED_FASTER"
    assert rows["fused"].record["gain_pct"] > 0 and rows["fused"].runs[0]["step_times_s"]
    assert rows["broken"].record["median_step_s"] is None
    assert ex.experiment["host_id"] is None  # written before experiment.json had provenance


def test_an_experiment_reads_the_calibration_from_its_own_history_url(tmp_path, compose_cfg):
    from afbench.config import validate_config
    from afbench.history.calibration import for_plan
    from afbench.plan import make_plan
    from support.history import seed_calibration

    url = f"sqlite:///{tmp_path / 'team.sqlite'}"  # not $AFBENCH_HISTORY_URL
    kind = seed_calibration(url, tmp=tmp_path)
    plan = make_plan(validate_config(compose_cfg()), tmp_path / "out")
    plan = plan.model_copy(update={"variants": [plan.baseline]})  # one kind: its own
    assert for_plan(plan, url)[1]["kind"] == kind
    assert for_plan(plan)[1] is None  # the environment's database has none
