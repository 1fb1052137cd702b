"""The store owns the output directory's files: one schema version, an upgrade chain per file,
unknown keys rejected with the file and the key named (afbench.store.versioning)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from afbench.errors import OutputError
from afbench.messages import as_written, labels, render
from afbench.schema import SCHEMA_VERSION
from afbench.store import EXPERIMENT_FILE, ExperimentRecord, FileSchema, OutDir, StoredFile

STORED = Path(__file__).parent / "fixtures" / "results"


class Thing(StoredFile):
    size_mib: float
    name: str = ""


def test_an_upgrade_chain_runs_every_step_in_order_from_the_files_version():
    seen = []

    def v0(d):  # version 0 said "size" in bytes
        seen.append(0)
        return {"size_mib": d.pop("size") / 2**20, **d}

    def v1(d):  # version 1 had no name
        seen.append(1)
        return {"name": "unnamed", **d}

    steps = (v0, v1) + tuple(lambda d: d for _ in range(SCHEMA_VERSION - 2))
    things = FileSchema("thing.json", Thing, steps=steps)
    assert things.load({"size": 2**21}) == Thing(size_mib=2.0, name="unnamed")
    assert seen == [0, 1]
    seen.clear()
    assert things.load({"schema_version": 1, "size_mib": 3.0}).name == "unnamed"
    assert seen == [1]
    seen.clear()
    current = things.load({"schema_version": SCHEMA_VERSION, "size_mib": 1.0, "name": "x"})
    assert (current.name, current.schema_version, seen) == ("x", SCHEMA_VERSION, [])


def test_a_chain_must_have_one_step_per_older_version():
    with pytest.raises(TypeError, match="thing.json: 1 upgrade steps"):
        FileSchema("thing.json", Thing, steps=(lambda d: d,))


def test_a_misspelt_key_is_an_error_naming_the_file_and_the_key(tmp_path):
    path = tmp_path / "experiment.json"
    data = json.loads((STORED / "v1" / "experiment.json").read_text())
    data["asets"] = data.pop("assets")
    path.write_text(json.dumps(data))
    with pytest.raises(
        OutputError,
        match=r"experiment\.json: unknown key 'asets'.*remove or "
        r"correct it",
    ):
        EXPERIMENT_FILE.read(path)
    data["assets"] = data.pop("asets")
    data["provenance"] = {"host": {"host_idd": "abc"}}
    path.write_text(json.dumps(data))
    with pytest.raises(OutputError, match=r"unknown key 'provenance\.host\.host_idd'"):
        EXPERIMENT_FILE.read(path)


def test_a_file_of_a_newer_version_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(
        OutputError,
        match=rf"experiment\.json: schema_version {SCHEMA_VERSION + 1}"
        r" .* newer afbench",
    ):
        EXPERIMENT_FILE.read(path)
    path.write_text("[1, 2]")
    with pytest.raises(OutputError, match=r"experiment\.json: holds list, not a JSON object"):
        EXPERIMENT_FILE.read(path)


@pytest.mark.parametrize("version", ["v0", "v1"])
def test_a_stored_experiment_json_loads_typed_and_upgraded(version):
    raw = json.loads((STORED / version / "experiment.json").read_text())
    assert "schema_version" not in raw  # versions 0 and 1 wrote none
    exp = OutDir(STORED / version).experiment()
    assert exp.schema_version == SCHEMA_VERSION
    assert exp.config.experiment.name == raw["config"]["experiment"]["name"]
    assert exp.variants == raw["config"]["experiment"]["variants"]
    assert exp.report.lang == raw["config"]["report"]["lang"]
    assert exp.assets.model.sha256 == raw["assets"]["model"]["sha256"]
    assert exp.calibration is None


def test_a_directory_without_experiment_json_reads_an_empty_record(tmp_path):
    exp = OutDir(tmp_path).experiment()
    assert (exp.config, exp.variants, exp.report.lang, exp.calibration_dict()) == (
        None,
        {},
        "en",
        None,
    )


def test_what_the_experiment_writes_the_store_reads_back_unchanged(tmp_path):
    stored = OutDir(STORED / "v1").experiment()
    record = ExperimentRecord.model_validate(
        {
            **stored.model_dump(),
            "calibration": {
                "kind": "k",
                "host_id": "0" * 16,
                "spread_pct": 1.5,
                "df": 11.0,
                "n_pairs": 12,
                "n_outlier_pairs": 0,
                "n_experiments": 2,
                "updated_at": "2026-12-01T00:00:00+00:00",
            },
            "provenance": {
                "afbench": "0.1",
                "git_commit": None,
                "cwd": "/x",
                "host": {
                    "hostname": "h",
                    "cpu_model": "c",
                    "cpu_count": 2,
                    "accelerator": None,
                    "driver": None,
                    "host_id": "1" * 16,
                },
                "cann": None,
            },
        }
    )
    EXPERIMENT_FILE.write(tmp_path / "experiment.json", record)
    written = json.loads((tmp_path / "experiment.json").read_text())
    assert written["schema_version"] == SCHEMA_VERSION
    back = OutDir(tmp_path).experiment()
    assert back == record
    assert back.calibration_dict()["spread_pct"] == 1.5
    with pytest.raises(TypeError, match="expected ExperimentRecord, got Thing"):
        EXPERIMENT_FILE.write(tmp_path / "experiment.json", Thing(size_mib=1.0))


def test_a_provenance_without_some_fields_reads_them_as_none(tmp_path):
    shutil.copytree(STORED / "v1", tmp_path / "v1")
    path = tmp_path / "v1" / "experiment.json"
    data = json.loads(path.read_text())
    data["provenance"] = {"afbench": "9.9", "host": {"host_id": "abcd" * 4}}
    path.write_text(json.dumps(data))
    exp = OutDir(tmp_path / "v1").experiment()
    assert (exp.provenance.afbench, exp.provenance.host.host_id, exp.provenance.cann) == (
        "9.9",
        "abcd" * 4,
        None,
    )


# --- plan.json, runspec.json, status.json (afbench.store.run) ----------------------------


@pytest.mark.parametrize("version", ["v0", "v1"])
def test_a_stored_plan_runspec_and_status_load_upgraded(version):
    from afbench.store import PLAN_FILE, RUNSPEC_FILE, STATUS_FILE

    out = STORED / version
    assert "schema_version" not in json.loads((out / "plan.json").read_text())
    plan = OutDir(out).plan()
    assert plan.schema_version == SCHEMA_VERSION and len(plan.runs) == 16
    run = out / "runs" / "plain-train-r1"
    spec = RUNSPEC_FILE.read(run / "runspec.json")
    assert spec == plan.runs[[r.run_id for r in plan.runs].index("plain-train-r1")]
    status = STATUS_FILE.read(run / "status.json")
    raw = json.loads((run / "status.json").read_text())
    assert raw.get("schema_version", 0) == {"v0": 0, "v1": 1}[version]
    assert (status.schema_version, status.status, status.config_hash) == (
        SCHEMA_VERSION,
        "OK",
        spec.config_hash,
    )
    assert PLAN_FILE.read(out / "plan.json") == plan


def test_a_misspelt_key_in_status_json_names_the_file_and_the_key(tmp_path):
    run = tmp_path / "runs" / "plain-train-r1"
    shutil.copytree(STORED / "v1" / "runs" / "plain-train-r1", run)
    data = json.loads((run / "status.json").read_text())
    data["exit_cod"] = data.pop("exit_code")
    (run / "status.json").write_text(json.dumps(data))
    from afbench.store import RunDir

    with pytest.raises(OutputError, match=r"plain-train-r1/status\.json: unknown key 'exit_cod'"):
        RunDir(run).status()


def test_the_launcher_decides_a_runs_status_and_window_once_where_it_ends(compose_cfg, tmp_path):
    """A worker that exits 0 with a result but whose log repeats every step (two ranks without
    a prefix) is FAILED by the launcher itself: what it returns is what status.json holds."""
    import sys

    from afbench.config import validate_config
    from afbench.launch.local import launch_run
    from afbench.plan import make_plan
    from afbench.store import RUNSPEC_FILE, RunDir

    workers = Path(__file__).parent / "fault_workers"
    conf = validate_config(
        compose_cfg(
            "backend=cpu",
            "engine=command",
            f"engine.executable={sys.executable}",
            f"engine.args=[{workers / 'twice.py'}]",
            "scheduler.steps=6",
            "scheduler.measure.first_step=3",
            "scheduler.measure.last_step=6",
            "launcher.timeout_s=120",
        )
    )
    spec = make_plan(conf, tmp_path / "out").runs[0]
    status = launch_run(spec)
    run = RunDir(Path(spec.run_dir))
    assert (status.status, status.exit_code) == ("FAILED", 0)
    assert (
        status.reason.text.startswith("invalid step log:") and "several ranks" in status.reason.text
    )
    # the worker wrote the engine's typed result; the loader reads it back as written
    stored = json.loads(run.result_path.read_text())
    assert stored["schema_version"] == SCHEMA_VERSION and stored["engine"] == "command"
    assert stored["memory"]["source"]["key"] == "src_not_reported"  # a message, not English
    assert stored["memory"]["source"]["text"] == "not reported (engine command)"
    assert "memory_source" not in stored
    assert run.result().model_dump(mode="json") == stored
    assert run.status() == status
    assert RUNSPEC_FILE.read(run.path / "runspec.json") == spec
    assert json.loads((run.path / "runspec.json").read_text())["schema_version"] == SCHEMA_VERSION


# --- result.json (afbench.store.result) --------------------------------------------------


def test_a_version_1_result_gets_its_flat_memory_and_efficiency_nested():
    from afbench.store import RESULT_FILE

    path = STORED / "v1" / "runs" / "plain-train-r1" / "result.json"
    raw = json.loads(path.read_text())
    assert raw["memory_source"] == "not reported (engine command)" and "memory" not in raw
    result = RESULT_FILE.read(path)
    # a recorded English sentence is kept as written, in every language (schema 5)
    assert result.memory.source == as_written(raw["memory_source"])
    assert render(result.memory.source, labels("zh")) == raw["memory_source"]
    assert result.efficiency.source.text == raw["tflops_source"]
    assert (result.memory.peak_rss_gib, result.efficiency.mfu_pct) == (None, None)
    assert (result.argv, result.steps_logged, result.command_wall_s) == (
        raw["argv"],
        raw["steps_logged"],
        raw["command_wall_s"],
    )


def test_nesting_moves_every_flat_figure_and_each_ranks_own():
    from afbench.store import RESULT_FILE, nest_figures

    flat = {
        "workload": "sft",
        "peak_memory_reserved_gib": 4.5,
        "peak_memory_reserved_pct": 2.0,
        "memory_source": "torch.cuda",
        "memory_window": "steps 2-3",
        "memory_per_rank": [
            {
                "rank": 0,
                "peak_memory_allocated_gib": 3.0,
                "peak_memory_reserved_gib": 4.5,
                "peak_rss_gib": None,
                "memory_source": "torch.cuda of cuda:0",
            }
        ],
        "tflops_per_device": 0.5,
        "peak_tflops_source": "table",
        "tflops_source": "afbench",
        "afbench_tflops_source": "n/a",
        "flops_params": 1e6,
        "kv_cache_gib": None,
    }
    nested = nest_figures(flat)
    assert set(nested) == {"workload", "memory", "efficiency"}
    result = RESULT_FILE.load({**flat, "schema_version": 1})  # a version-1 result.json
    assert (result.memory.peak_reserved_gib, result.memory.peak_reserved_pct) == (4.5, 2.0)
    assert (result.memory.source.text, result.memory.window.text) == ("torch.cuda", "steps 2-3")
    assert result.memory.per_rank[0].peak_allocated_gib == 3.0
    assert result.memory.per_rank[0].source.text == "torch.cuda of cuda:0"
    assert (
        result.efficiency.peak_source.text,
        result.efficiency.source.text,
        result.efficiency.afbench_source.text,
        result.efficiency.flops_params,
    ) == ("table", "afbench", "n/a", 1e6)
    # the sweep's columns keep the version-1 names, read through the nested records
    assert (result.peak_memory_reserved_gib, result.tflops_per_device) == (4.5, 0.5)
    assert nest_figures(result.model_dump()) == result.model_dump()  # idempotent


def test_an_engine_result_with_a_misspelt_key_fails_naming_it():
    from pydantic import ValidationError

    from afbench.store import RunResult

    with pytest.raises(ValidationError, match="peak_rss_gb"):
        RunResult.from_fields({"workload": "sft", "peak_rss_gb": 1.0})


def test_a_stored_result_with_an_unknown_key_names_the_file_and_the_key(tmp_path):
    from afbench.store import RunDir

    run = tmp_path / "r"
    run.mkdir()
    data = json.loads((STORED / "v1" / "runs" / "plain-train-r1" / "result.json").read_text())
    (run / "result.json").write_text(json.dumps({**data, "contention": {"stael_pct": 1.0}}))
    with pytest.raises(OutputError, match=r"r/result\.json: unknown key 'contention\.stael_pct'"):
        RunDir(run).result()


# --- summary.json (afbench.store.summary) ------------------------------------------------


def test_a_misspelt_key_deep_in_a_summary_names_the_file_and_the_path(tmp_path):
    from afbench.store import read_summary

    data = json.loads((STORED / "v1" / "summary.json").read_text())
    data["comparisons"][0]["speed"]["gain_pc"] = data["comparisons"][0]["speed"].pop("gain_pct")
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(
        OutputError,
        match=r"summary\.json: unknown key "
        r"'comparisons\.0\.speed\.gain_pc'",
    ):
        read_summary(tmp_path / "summary.json")


def test_a_version_0_summary_goes_through_both_steps_of_its_chain():
    from afbench.store import SUMMARY_FILE

    raw = json.loads((STORED / "v0" / "summary.json").read_text())
    assert "schema_version" not in raw and "baseline_mean_s" in raw["comparisons"][0]
    upgraded = SUMMARY_FILE.upgrade(raw)
    assert upgraded["schema_version"] == SCHEMA_VERSION
    first = upgraded["comparisons"][0]
    assert first["baseline"]["mean_step_s"] == raw["comparisons"][0]["baseline_mean_s"]
    assert first["speed"]["ci_low"] == raw["comparisons"][0]["gain_ci_low"]
    assert SUMMARY_FILE.load(raw).comparisons[0].speed.ci_low_pct == first["speed"]["ci_low"]


@pytest.mark.parametrize(
    "where, key, value, message",
    [
        (
            "baseline_runs",
            "n_runs",
            True,
            "calibration.baseline_runs.n_runs: Input should be a valid integer",
        ),
        (
            "variant_runs",
            "n_runs",
            "24",
            "calibration.variant_runs.n_runs: Input should be a valid integer",
        ),
        (
            "baseline_runs",
            "step_s",
            "0.25",
            "calibration.baseline_runs.step_s: Input should be a valid number",
        ),
        (None, "n_pairs", True, "calibration.n_pairs: Input should be a valid integer"),
        (None, "spread_pct", "3.0", "calibration.spread_pct: Input should be a valid number"),
        (None, "df", True, "calibration.df: Input should be a valid number"),
        (None, "n_pairs", 0, "calibration.n_pairs: Input should be greater than or equal to 1"),
        (
            None,
            "n_outlier_pairs",
            -1,
            "calibration.n_outlier_pairs: Input should be greater than or equal to 0",
        ),
    ],
)
def test_a_hand_edited_calibration_number_is_an_output_error_naming_the_key(
    tmp_path, where, key, value, message
):
    # n_runs: true was read as 1 run, "3.0" as 3.0: afbench writes JSON numbers only
    raw = json.loads((STORED / "v2" / "experiment.json").read_text())
    location = {"step_s": 0.25, "n_runs": 24, "spread_pct": 3.0, "df": 23}
    good = {
        "kind": "k",
        "host_id": "h",
        "spread_pct": 3.0,
        "df": 23,
        "n_pairs": 24,
        "baseline_runs": location,
        "variant_runs": location,
    }
    (tmp_path / "experiment.json").write_text(json.dumps({**raw, "calibration": good}))
    assert OutDir(tmp_path).experiment().calibration.baseline_runs.n_runs == 24
    cal = dict(good)
    if where:
        cal[where] = {**location, key: value}
    else:
        cal[key] = value
    (tmp_path / "experiment.json").write_text(json.dumps({**raw, "calibration": cal}))
    with pytest.raises(OutputError) as err:
        OutDir(tmp_path).experiment()
    assert str(err.value) == f"{tmp_path / 'experiment.json'}: {message}"


# --- version 5: recorded sentences as messages (issue 32 item 4) ---------------------------


def test_a_version_4_status_reason_becomes_a_message_shown_as_written():
    from afbench.store.run import STATUS_FILE

    old = {
        "schema_version": 4,
        "run_id": "b-train-r1",
        "status": "SKIPPED",
        "exit_code": 125,
        "reason": "baseline run a-train-r1 did not succeed",
        "config_hash": "0" * 64,
    }
    status = STATUS_FILE.load(old)
    # never read back into a catalog key by its words: shown as written, in any language
    assert status.reason == as_written("baseline run a-train-r1 did not succeed")
    assert render(status.reason, labels("zh")) == old["reason"]
    assert STATUS_FILE.load({**old, "reason": "", "status": "OK"}).reason is None
    assert STATUS_FILE.load({**old, "reason": status.reason.model_dump()}) == status  # v5


def test_the_upgrade_to_5_turns_each_recorded_string_of_every_file_into_a_message():
    from afbench.store.versioning import as_messages

    data = {
        "runs": [{"run_id": "a", "reason": "RunFailed: exit 3"}, {"run_id": "b", "reason": ""}],
        "comparisons": [{"baseline": {"memory": {"source": "getrusage", "window": None}}}],
        "switches": {"a-train-r1": [{"name": "autofuse", "detail": "torch.compile(...)"}]},
        "reruns": [{"by": "x", "reasons": ["steal 6.0% > 5%"]}],
    }
    out = as_messages(
        data,
        "runs.*.reason",
        "comparisons.*.baseline.memory.source",
        "comparisons.*.baseline.memory.window",
        "comparisons.*.variant.memory.source",  # absent: left alone
        "switches.*.*.detail",
        "reruns.*.reasons",
    )
    assert out["runs"][0]["reason"] == as_written("RunFailed: exit 3").model_dump()
    assert out["runs"][1]["reason"] is None
    assert out["comparisons"][0]["baseline"]["memory"] == {
        "source": as_written("getrusage").model_dump(),
        "window": None,
    }
    assert out["switches"]["a-train-r1"][0]["detail"]["text"] == "torch.compile(...)"
    assert out["reruns"][0]["reasons"] == [as_written("steal 6.0% > 5%").model_dump()]
    assert data["runs"][0]["reason"] == "RunFailed: exit 3"  # the input is not changed
