"""Shared helpers of the benchmarks in bench/: the machine header (date, cores, load), recipes
written into a scratch folder, and ``python -m afbench`` run as a user would run it.

Not a test helper: nothing here asserts; a benchmark prints what it measured and whether the
target was met.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

BENCH_DIR = Path(__file__).resolve().parent
WORKERS = BENCH_DIR / "workers"
REPO = BENCH_DIR.parent
PYTHON = sys.executable


def uptime() -> str:
    """The ``uptime`` line (load averages over 1, 5, 15 min), or os.getloadavg() if absent."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        one, five, fifteen = os.getloadavg()
        return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"


def load_line(label: str = "load") -> str:
    """``<label>: load average: a, b, c`` (the part of ``uptime`` that matters here)."""
    up = uptime()
    cut = up.find("load average")
    return f"{label}: {up[cut:] if cut >= 0 else up}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def repo_state() -> str:
    """``HEAD <sha>`` and how many tracked files outside bench/ differ from it (others' edits
    in progress change what is measured); read-only git commands."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "repo: not a git checkout"
    others = [line for line in dirty if not line[3:].startswith("bench/")]
    return (
        f"repo: HEAD {sha}, {len(others)} tracked file(s) outside bench/ modified in the work tree"
    )


def header(name: str, argv: list[str] | None = None) -> None:
    """Print what every published number needs beside it: date, machine, versions, load."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    args = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"== {name} {args}".rstrip())
    print(f"date: {now}")
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}"
    )
    print(repo_state())
    print(load_line("load at start"))
    sys.stdout.flush()


def footer(t0: float) -> None:
    print(load_line("load at end"))
    print(f"benchmark wall time: {time.perf_counter() - t0:.1f} s")
    sys.stdout.flush()


def scratch_dir(keep: str | None, prefix: str) -> Path:
    """``keep`` if given (created), else a fresh temporary folder."""
    if keep:
        path = Path(keep).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix=prefix))


def cleanup(path: Path, keep: str | None) -> None:
    if not keep:
        shutil.rmtree(path, ignore_errors=True)


def command_engine(script: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Overrides that make a run execute ``python <script> <args>`` with the command engine."""
    engine: dict[str, Any] = {"name": "command", "executable": PYTHON, "args": [str(script), *args]}
    if env:
        engine["env"] = env
    return {"engine": engine}


def write_recipe(
    folder: Path,
    name: str,
    variants: dict[str, dict],
    phases: dict[str, dict],
    *,
    rounds: int = 1,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``<folder>/recipes/<name>.yaml`` (first variant = baseline); returns the recipes dir
    (the value of AFBENCH_RECIPE_PATH)."""
    recipes = folder / "recipes"
    recipes.mkdir(parents=True, exist_ok=True)
    recipe: dict[str, Any] = dict(extra or {})
    recipe["experiment"] = {
        "name": name,
        "baseline": next(iter(variants)),
        "variants": variants,
        "phases": phases,
        "skip_policy": "per_variant",
    }
    recipe["verdict"] = {**recipe.get("verdict", {}), "rounds": rounds}
    (recipes / f"{name}.yaml").write_text(
        "# @package _global_\n" + yaml.safe_dump(recipe, sort_keys=False)
    )
    return recipes


def afbench_env(recipes: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)
    if recipes is not None:
        env["AFBENCH_RECIPE_PATH"] = str(recipes)
    return env


def run_afbench(
    cwd: Path,
    recipes: Path | None,
    *args: str,
    python_flags: tuple[str, ...] = (),
    timeout: float = 3600,
) -> tuple[float, subprocess.CompletedProcess]:
    """``python [flags] -m afbench <args>`` in ``cwd``; returns (wall seconds, the process).

    Raises RuntimeError with the output tail when afbench exits non-zero: a benchmark of a
    failing pipeline would measure the wrong thing.
    """
    argv = [PYTHON, *python_flags, "-m", "afbench", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=afbench_env(recipes),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail}")
    return wall, proc


def output_dirs(root: Path) -> list[Path]:
    """afbench output directories (those with a plan.json) below ``root/outputs``, oldest first."""
    return sorted(
        (p.parent for p in (root / "outputs").glob("*/*/plan.json")),
        key=lambda p: p.stat().st_mtime,
    )


def run_afbench_out(
    cwd: Path, recipes: Path | None, *args: str, python_flags: tuple[str, ...] = ()
) -> tuple[float, float, Path]:
    """Run afbench once; (wall seconds less device-lock waits, lock-wait seconds, output dir)."""
    before = set(output_dirs(cwd))
    wall, _ = run_afbench(cwd, recipes, *args, python_flags=python_flags)
    new = [d for d in output_dirs(cwd) if d not in before]
    if len(new) != 1:
        raise RuntimeError(f"expected one new output dir under {cwd}/outputs, found {new}")
    wait = lock_wait_s(new[0])
    return wall - wait, wait, new[0]


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def run_walls(out_dir: Path) -> dict[str, float]:
    """run_id -> wall seconds of its worker process (status.json ``wall_s``)."""
    return {
        p.parent.name: float(read_json(p)["wall_s"])
        for p in sorted((Path(out_dir) / "runs").glob("*/status.json"))
    }


_LOCK_RE = re.compile(r"got device lock .* after ([0-9.]+) s")


def lock_wait_s(out_dir: Path) -> float:
    """Seconds this invocation's runs waited for afbench's device lock (another afbench run,
    e.g. another engineer's test, held the machine's cpu lock), summed from its cli.log."""
    log = Path(out_dir) / "cli.log"
    if not log.is_file():
        return 0.0
    return sum(float(m.group(1)) for m in _LOCK_RE.finditer(log.read_text(errors="replace")))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def verdict_mark(met: bool) -> str:
    return "MET" if met else "MISSED"
