"""The issue's "done when", end to end: afbench records each experiment when it ends, and
``python -m afbench.history check`` passes two runs of an experiment without a slowdown and
fails (exit 1, naming it) on a third with a planted 30% slowdown; ``history report`` shows
the records with trend plots. The command engine runs tests/fault_workers/planted_history.py
(planted step times, 30% more "work" through $AFBENCH_BENCH_WORK as with the matmul worker;
nothing is timed). The same flow on PostgreSQL: tests/test_history.py's postgresql cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKER = Path(__file__).parent / "fault_workers" / "planted_history.py"

pytestmark = pytest.mark.e2e


def afbench(cwd: Path, url: str, seed: int, work: float = 1.0) -> subprocess.CompletedProcess:
    recipe = {
        "scheduler": {"steps": 6, "measure": {"first_step": 2, "last_step": 6}},
        "engine": {
            "name": "command",
            "executable": sys.executable,
            "args": [str(WORKER), "{steps}", "{round}-{variant}"],
        },
        "experiment": {
            "name": "gate_e2e",
            "baseline": "base",
            "variants": {"base": {}},
            "phases": {"train": {}},
        },
        "verdict": {"rounds": 2},
    }
    (cwd / "recipes").mkdir(exist_ok=True)
    (cwd / "recipes" / "gate_e2e.yaml").write_text(
        "# @package _global_\n" + yaml.safe_dump(recipe, sort_keys=False)
    )
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(
        AFBENCH_RECIPE_PATH=str(cwd / "recipes"),
        AFBENCH_HISTORY_URL=url,
        AFBENCH_PLANTED_SEED=str(seed),
        AFBENCH_BENCH_WORK=str(work),
    )
    return subprocess.run(
        [sys.executable, "-m", "afbench", "experiment=gate_e2e", "preflight.min_free_gib=0"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def history(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "afbench.history", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_passes_two_equal_runs_and_fails_a_planted_30pct_slowdown(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    for seed in (1, 2):
        proc = afbench(tmp_path, url, seed)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "afbench: history: recorded 1 variant(s) of gate_e2e" in proc.stderr
    ok = history(url, "check", "--experiment", "gate_e2e")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("OK gate_e2e/base: no slowdown")

    assert afbench(tmp_path, url, 3, work=1.3).returncode == 0
    bad = history(url, "check", "--experiment", "gate_e2e")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.startswith("REGRESSION gate_e2e/base:")
    assert 25 < float(bad.stdout.split(": ")[1].split("%")[0]) < 35

    out = next(tmp_path.glob("outputs/*/*/experiment.json"))
    prov = json.loads(out.read_text())["provenance"]
    assert len(prov["host"]["host_id"]) == 16 and prov["host"]["cpu_model"]
    assert prov["afbench"] and prov["git_commit"] is None  # tmp_path is no repository

    listed = history(url, "list").stdout.splitlines()
    assert len(listed) == 3 and all("gate_e2e/base" in line for line in listed)
    report = tmp_path / "history.html"
    assert history(url, "report", "-o", str(report)).returncode == 0
    page = report.read_text()
    assert "<svg" in page and page.count("report.html") >= 6  # 3 points + 3 table rows
