"""Compiler caches of the workers (afbench.launch.local.compiler_cache_dirs): which caches the
runs of one experiment share, that the FX graph and AOT autograd caches stay off, that a run
which found another run's kernels is recorded as warm, and that the report says so where it
shows the time to first step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from afbench.compare import first_step
from afbench.config import validate_config
from afbench.launch.local import compiler_cache_dirs, kernel_cache_state, launch_run, worker_env
from afbench.plan import make_plan

WORKERS = Path(__file__).parent / "fault_workers"
KERNEL_DIRS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
    """The cpu lock of these runs lives in tmp_path: never wait on anyone else's runs."""
    monkeypatch.setenv("AFBENCH_LOCK_DIR", str(tmp_path / "locks"))


def plan_runs(compose_cfg, out: Path, *overrides: str):
    return make_plan(validate_config(compose_cfg(*overrides)), out).runs


def test_runs_of_one_cpu_experiment_share_kernel_binaries_but_no_fx_or_autograd_cache(
    compose_cfg, tmp_path
):
    out = tmp_path / "out"
    runs = plan_runs(
        compose_cfg, out, "experiment=sft_af_compare", "backend=cpu", "verdict.rounds=1"
    )
    on = [r for r in runs if r.config.optimization.autofuse]
    assert len(on) == 2 and on[0].run_dir != on[1].run_dir
    first, second = (worker_env(r, Path(r.run_dir)) for r in on)
    # the C++ kernels (inside TORCHINDUCTOR_CACHE_DIR on cpu) and the precompiled header
    # (inside TMPDIR) of the experiment's compiled runs are one folder ...
    for name in (*KERNEL_DIRS, "TMPDIR"):
        assert first[name] == second[name], name
    assert first["TORCHINDUCTOR_CACHE_DIR"] == str(out / "cache" / "inductor")
    assert Path(first["TMPDIR"]).is_dir()
    # ... while the graphs are traced, lowered and generated again in every run
    for env in (first, second):
        assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0"
        assert env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "0"


def test_two_experiments_never_share_a_kernel_cache(compose_cfg, tmp_path):
    a, b = (plan_runs(compose_cfg, tmp_path / name, "backend=cpu")[0] for name in ("a", "b"))
    assert (
        worker_env(a, Path(a.run_dir))["TORCHINDUCTOR_CACHE_DIR"]
        != worker_env(b, Path(b.run_dir))["TORCHINDUCTOR_CACHE_DIR"]
    )


@pytest.mark.parametrize("backend", ["cuda", "npu"])
def test_accelerators_follow_the_reference_inductor_cache_per_run_triton_shared(backend, tmp_path):
    one, two = (tmp_path / "out" / "runs" / rid for rid in ("af_on-train-r1", "af_on-profile-r1"))
    a, b = compiler_cache_dirs(backend, one), compiler_cache_dirs(backend, two)
    assert a["TORCHINDUCTOR_CACHE_DIR"] == one / "cache" / "inductor"
    assert a["TORCHINDUCTOR_CACHE_DIR"] != b["TORCHINDUCTOR_CACHE_DIR"]
    assert a["TMPDIR"] != b["TMPDIR"]
    assert a["TRITON_CACHE_DIR"] == b["TRITON_CACHE_DIR"] == tmp_path / "out" / "cache" / "triton"
    assert a["TORCH_EXTENSIONS_DIR"] == b["TORCH_EXTENSIONS_DIR"]


def test_a_path_with_whitespace_is_replaced_by_one_without(tmp_path):
    dirs = compiler_cache_dirs("cpu", tmp_path / "my out" / "runs" / "af_on-train-r1")
    assert not any(c.isspace() for p in dirs.values() for c in str(p))
    again = compiler_cache_dirs("cpu", tmp_path / "my out" / "runs" / "af_on-profile-r1")
    assert dirs["TORCHINDUCTOR_CACHE_DIR"] == again["TORCHINDUCTOR_CACHE_DIR"]


def test_kernel_cache_is_warm_once_a_cache_holds_a_file(tmp_path):
    env = {name: str(tmp_path / name) for name in KERNEL_DIRS}
    for folder in env.values():
        (Path(folder) / "locks").mkdir(parents=True)  # empty folders are no kernels
    assert kernel_cache_state(env) == "cold"
    (Path(env["TRITON_CACHE_DIR"]) / "ab" / "k.so").parent.mkdir()
    (Path(env["TRITON_CACHE_DIR"]) / "ab" / "k.so").write_bytes(b"\x7fELF")
    assert kernel_cache_state(env) == "warm"


def test_launch_run_records_whether_the_shared_kernel_cache_was_warm(compose_cfg, tmp_path):
    runs = plan_runs(
        compose_cfg,
        tmp_path / "out",
        "backend=cpu",
        "engine=command",
        f"engine.executable={sys.executable}",
        f"engine.args=[{WORKERS / 'good.py'},'{{steps}}']",
        "scheduler.steps=6",
        "scheduler.measure.first_step=3",
        "scheduler.measure.last_step=6",
        "launcher.timeout_s=120",
        "verdict.rounds=2",
    )
    assert launch_run(runs[0]).kernel_cache == "cold"
    # what a compiled first run leaves behind: a kernel binary in the experiment's cache
    kernel = tmp_path / "out" / "cache" / "inductor" / "x7" / "cx7kernel.so"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"\x7fELF")
    status = launch_run(runs[1])
    assert status.status == "OK" and status.kernel_cache == "warm"
    written = json.loads((Path(runs[1].run_dir) / "status.json").read_text())
    assert written["kernel_cache"] == "warm"


def runs_table(*rows: tuple[float, str | None]) -> pd.DataFrame:
    return pd.DataFrame([{"first_step_s": t, "kernel_cache": k} for t, k in rows])


def test_time_to_first_step_comes_from_the_cold_runs_when_there_are_any():
    got = first_step(runs_table((60.0, "cold"), (20.0, "warm"), (22.0, "warm")))
    assert got == {"first_step_s": 60.0, "first_step_kernel_cache": "cold"}


def test_a_contended_cold_run_replaced_by_a_warm_rerun_still_gives_the_first_compile():
    # the newcomer's case: af_on-train-r1 compiled cold (62.6 s), was contended and rerun; the
    # rerun found its kernels (18.5 s). The side is the rerun; its time to first step the cold
    from types import SimpleNamespace as NS

    from afbench.compare.sides import with_replaced

    col = NS(
        plan=NS(
            reruns=[
                NS(by="on-r1-rerun1", replaced=NS(run_id="on-r1")),
                NS(by="on-r1-rerun2", replaced=NS(run_id="on-r1-rerun1")),
            ]
        )
    )
    ids = with_replaced(col, ["on-r1-rerun2", "on-r2"])
    assert ids == ["on-r1-rerun2", "on-r2", "on-r1-rerun1", "on-r1"]
    table = pd.DataFrame(
        [
            {"run_id": "on-r1", "first_step_s": 62.6, "kernel_cache": "cold"},
            {"run_id": "on-r1-rerun1", "first_step_s": 18.0, "kernel_cache": "warm"},
            {"run_id": "on-r1-rerun2", "first_step_s": 18.5, "kernel_cache": "warm"},
            {"run_id": "on-r2", "first_step_s": 19.0, "kernel_cache": "warm"},
        ]
    )
    got = first_step(table[table.run_id.isin(ids)])
    assert got == {"first_step_s": 62.6, "first_step_kernel_cache": "cold"}


def test_time_to_first_step_of_only_warm_runs_is_marked_warm():
    got = first_step(runs_table((20.0, "warm"), (22.0, "warm")))
    assert got == {"first_step_s": 21.0, "first_step_kernel_cache": "warm"}
    # directories written before kernel_cache was recorded: the plain mean, unmarked
    old = first_step(pd.DataFrame([{"first_step_s": 3.0}, {"first_step_s": 5.0}]))
    assert old == {"first_step_s": 4.0, "first_step_kernel_cache": None}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_report_says_where_time_to_first_step_was_measured_warm(tmp_path, lang):
    from afbench.config.models import ReportConfig
    from afbench.report.render import labels, render
    from afbench.store import Comparison, Compile, RunRow, Side, Summary

    def report(kernel_cache: str) -> str:
        variant = Side(name="af_on", first_step_s=31.1, first_step_kernel_cache=kernel_cache)
        summary = Summary(
            experiment="e",
            comparisons=[
                Comparison(
                    baseline=Side(name="af_off"),
                    variant=variant,
                    phase="train",
                    workload="sft",
                    verdict="NO_GAIN",
                    verdict_line="x",
                    compile=Compile(overhead_s=30.8, kernel_cache=kernel_cache),
                )
            ],
            runs=[
                RunRow(
                    run_id="af_on-profile-r1",
                    variant="af_on",
                    phase="profile",
                    repeat=1,
                    status="OK",
                    kernel_cache=kernel_cache,
                )
            ],
        )
        folder = tmp_path / kernel_cache
        folder.mkdir()
        (path,) = render(summary, folder, ReportConfig(formats=["md"], lang=lang))
        return path.read_text(encoding="utf-8")

    L = labels(lang)
    warm, cold = report("warm"), report("cold")
    assert L["first_step_warm"].format(variant="af_on") in warm
    assert L["run_kernel_cache_warm"] in warm
    assert L["first_step_cold"].format(variant="af_on") in cold
    assert L["first_step_warm"].format(variant="af_on") not in cold
    assert L["run_kernel_cache_warm"] not in cold
