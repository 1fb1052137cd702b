"""Peak memory (RSS) and time of afbench reading hostile sizes (issue 33 item 3), before and
after: a re-render of an output directory whose run log holds a 1 GiB line, a 6 MiB gzip
trace inflating to 6 GiB, and a 300 MiB torch_npu trace_view.json.

Each case runs in its own process under a 6 GiB address-space limit (RLIMIT_AS), so the
code before the change fails with MemoryError instead of taking the shared machine down;
its peak RSS is then "over the limit". ``--before SRC`` is the ``src`` folder of the code
to compare (default /work/main/src); the code after is this checkout's.

    .venv/bin/python bench/hostile_sizes.py [--before /work/main/src] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 6 << 30
GOOD = REPO / "tests" / "fault_workers" / "good.py"


def measure(src: Path, argv: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """(peak RSS MiB, wall s, exit status, last output line) of ``argv`` run with ``src``
    first on PYTHONPATH under the address-space limit."""
    env = {**os.environ, "PYTHONPATH": str(src)}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=limit
    )
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in out.strip().splitlines() if line.strip()]
    return usage.ru_maxrss / 1024, time.monotonic() - t0, proc.returncode, (lines or [""])[-1]


def experiment(root: Path) -> Path:
    """A finished one-run experiment (command engine) to re-render."""
    recipes = root / "recipes"
    recipes.mkdir()
    (recipes / "hostile.yaml").write_text(
        "# @package _global_\n"
        + json.dumps(
            {
                "scheduler": {"steps": 6, "measure": {"first_step": 3, "last_step": 6}},
                "experiment": {
                    "name": "hostile",
                    "baseline": "good",
                    "phases": {"train": {}},
                    "variants": {
                        "good": {
                            "engine": {
                                "name": "command",
                                "executable": sys.executable,
                                "args": [str(GOOD), "{steps}"],
                            }
                        }
                    },
                },
            }
        )
    )
    out = root / "out"
    env = {
        **os.environ,
        "AFBENCH_RECIPE_PATH": str(recipes),
        "AFBENCH_HISTORY_URL": f"sqlite:///{root / 'history.sqlite'}",
    }
    subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "experiment=hostile",
            f"hydra.run.dir={out}",
            "history.record=false",
        ],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    plan = json.loads((out / "plan.json").read_text())
    plan.pop("wait_for_quiet_s", None)  # the code before does not know the key
    (out / "plan.json").write_text(json.dumps(plan))
    exp = json.loads((out / "experiment.json").read_text())
    exp["config"]["experiment"].pop("wait_for_quiet_s", None)
    (out / "experiment.json").write_text(json.dumps(exp))
    return out


def bomb(path: Path, inflated: int) -> None:
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [{"ph": "X", "name": "')
        block = b"A" * (16 << 20)
        for _ in range(inflated // len(block)):
            fh.write(block)
        fh.write(b'", "ts": 1, "dur": 1}]}')


def trace_view(path: Path, size: int) -> int:
    """A torch_npu-shaped trace_view.json of about ``size`` bytes; returns its events."""
    n = 0
    with open(path, "w") as fh:
        fh.write(
            '[{"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "Ascend Hardware"}}'
        )
        written, ts = 0, 1732873000000000
        for step in range(5):
            fh.write(
                f', {{"ph": "X", "name": "ProfilerStep#{step}", "pid": 1, "tid": 1, '
                f'"ts": "{ts}.000", "dur": 100000000}}'
            )
            per_step = size // 5
            start = written
            while written - start < per_step:
                line = (
                    f', {{"ph": "X", "name": "MatMulV{n % 40}", "pid": 7, "tid": 2, '
                    f'"ts": "{ts + 10 + n % 1000}.125", "dur": 12.5, "args": {{"Model Id":'
                    f' 1, "Task Type": "AI_CORE", "Stream Id": 2, "Task Id": {n}}}}}'
                )
                fh.write(line)
                written += len(line)
                n += 1
            ts += 200000000
        fh.write("]")
    return n


READ_TRACE = (
    "import sys; from afbench.analysis.traces import read_trace; "
    "s = read_trace(sys.argv[1]); print('kernels', len(s.kernels), 'steps', len(s.steps))"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=Path("/work/main/src"))
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    after = REPO / "src"
    root = Path(tempfile.mkdtemp(prefix="afbench-hostile-")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} UTC  load {os.getloadavg()}  "
        f"before={args.before} after={after}  limit {LIMIT >> 30} GiB address space"
    )
    try:
        out, gz, view = root / "out", root / "rank0_trace.json.gz", root / "trace_view.json"
        if not (out / "report.md").is_file():  # --keep DIR of an earlier run: its inputs
            experiment(root)
            with open(next(out.glob("runs/*/stdout.log")), "ab") as fh:
                block = b"x" * (64 << 20)  # a 1 GiB line after the run's step lines
                for _ in range(16):
                    fh.write(block)
                fh.write(b"\n")
        log = next(out.glob("runs/*/stdout.log"))
        if not gz.is_file():
            bomb(gz, 6 << 30)
        if not view.is_file():
            trace_view(view, 300 << 20)
        events = view.read_bytes().count(b'"MatMulV')
        print(
            f"inputs: log {log.stat().st_size / 2**20:.0f} MiB (one 1024 MiB line); "
            f"gzip {gz.stat().st_size / 2**20:.1f} MiB -> 6144 MiB; trace_view.json "
            f"{view.stat().st_size / 2**20:.0f} MiB, {events} kernel events"
        )
        cases = [
            ("re-render, 1 GiB log line", [sys.executable, "-m", "afbench.report", str(out)]),
            ("gzip trace 6 MiB -> 6 GiB", [sys.executable, "-c", READ_TRACE, str(gz)]),
            ("trace_view.json 300 MiB", [sys.executable, "-c", READ_TRACE, str(view)]),
        ]
        print("| case | code | peak RSS (MiB) | wall (s) | exit | last line |")
        print("|---|---|---|---|---|---|")
        for name, argv in cases:
            for label, src in (("before", args.before), ("after", after)):
                rss, wall, code, last = measure(src, argv, root)
                print(
                    f"| {name} | {label} | {rss:.0f} | {wall:.1f} | {code} | {last[:110]} |",
                    flush=True,
                )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
