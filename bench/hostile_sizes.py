"""Peak memory (RSS) and time of afbench reading hostile sizes (issue 33), before and after: a
re-render of an output directory whose run log holds a 1 GiB line, a 6 MiB gzip trace inflating
to 6 GiB, and a 300 MiB torch_npu trace_view.json (``read_trace`` with its step table, the op
table the report reads, and a re-render of a run whose profile/ holds it).

Each case runs in its own process under a 6 GiB address-space limit (RLIMIT_AS), so the
code before the change fails with MemoryError instead of taking the shared machine down;
its peak RSS is then "over the limit". ``--before SRC`` is the ``src`` folder of the code
to compare (default /work/main/src); the code after is this checkout's.

    .venv/bin/python bench/hostile_sizes.py [--before /work/main/src] [--keep DIR]
        [--cases log gzip trace trace-render] [--trace-mib 300]
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
    """A torch_npu-shaped trace_view.json of about ``size`` bytes (a bare array; ``process_name``
    metadata; per kernel a host ``aclnn*`` launch, an ``s``/``f`` HostToDevice flow whose id is a
    ns timestamp above 2**53, and the kernel on ``Ascend Hardware`` with torch_npu's ``args``;
    an ``Overlap Analysis`` track); returns its kernel events."""
    host, dev, overlap = 2041, 2042, 2043
    n = 0
    with open(path, "w") as fh:
        fh.write(
            "["
            + ", ".join(
                f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, '
                f'"args": {{"name": "{name}"}}}}'
                for pid, name in (
                    (host, "Python"),
                    (dev, "Ascend Hardware"),
                    (overlap, "Overlap Analysis"),
                )
            )
        )
        written, ts = 0, 1732873000000000
        for step in range(5):
            fh.write(
                f', {{"ph": "X", "name": "ProfilerStep#{step}", "pid": {host}, "tid": {host}, '
                f'"ts": "{ts}.000", "dur": 100000000, "cat": "cpu_op", "args": {{}}}}'
            )
            start = written
            while written - start < size // 5:
                launch, run = f"{ts + 10 + n % 90000}.125", f"{ts + 40 + n % 90000}.375"
                fid = 1732873000000000000 + n
                line = (
                    f', {{"ph": "X", "name": "aclnnMatmul", "pid": {host}, "tid": {host}, '
                    f'"ts": "{launch}", "dur": 8.25, "cat": "cpu_op", "args": {{"Sequence '
                    f'number": {n}, "Fwd thread id": 0}}}}'
                    f', {{"ph": "s", "name": "HostToDevice", "id": {fid}, "pid": {host}, '
                    f'"tid": {host}, "ts": "{launch}", "cat": "HostToDevice"}}'
                    f', {{"ph": "f", "name": "HostToDevice", "id": {fid}, "pid": {dev}, '
                    f'"tid": 2, "ts": "{run}", "cat": "HostToDevice", "bp": "e"}}'
                    f', {{"ph": "X", "name": "aclnnMatmul_MatMulV{n % 40}", "pid": {dev}, '
                    f'"tid": 2, "ts": "{run}", "dur": 12.5, "args": {{"Model Id": 4294967295,'
                    f' "Task Type": "AI_CORE", "Stream Id": 2, "Task Id": {n}}}}}'
                )
                if n % 50 == 0:
                    line += (
                        f', {{"ph": "X", "name": "Computing", "pid": {overlap}, "tid": 1, '
                        f'"ts": "{run}", "dur": 12.5, "args": {{}}}}'
                    )
                fh.write(line)
                written += len(line)
                n += 1
            ts += 200000000
        fh.write("]")
    return n


READ_TRACE = (
    "import sys; from afbench.analysis.traces import read_trace; "
    "s = read_trace(sys.argv[1], {'wait': 0, 'warmup': 0, 'active': 5}); "
    "print('kernels', len(s.kernels), 'steps', len(s.steps), int(s.steps['kernels'].sum()))"
)
#: what the report reads of a trace_view.json (analysis.op_table), from afbench's own imports
OP_TABLE = (
    "import sys; from afbench.analysis.op_table import load_op_table; "
    "t = load_op_table(sys.argv[1]).table; print('op types', len(t), int(t['count'].sum()))"
)
#: the process's RSS before reading anything: the imports, a floor under every case
IMPORTS = "import afbench.analysis.op_table, afbench.analysis.traces, ijson, numpy, pandas"
CASES = ("log", "gzip", "trace", "trace-render")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=Path("/work/main/src"))
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--trace-mib", type=int, default=300)
    args = ap.parse_args()
    after = REPO / "src"
    root = Path(tempfile.mkdtemp(prefix="afbench-hostile-")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} UTC  load {os.getloadavg()}  "
        f"before={args.before} after={after}  limit {LIMIT >> 30} GiB address space"
    )
    try:
        out, gz = root / "out", root / "rank0_trace.json.gz"
        view = root / "profile" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        cases = []
        if "log" in args.cases:
            if not (out / "report.md").is_file():  # --keep DIR of an earlier run: its inputs
                experiment(root)
                with open(next(out.glob("runs/*/stdout.log")), "ab") as fh:
                    block = b"x" * (64 << 20)  # a 1 GiB line after the run's step lines
                    for _ in range(16):
                        fh.write(block)
                    fh.write(b"\n")
            log = next(out.glob("runs/*/stdout.log"))
            print(f"input: log {log.stat().st_size / 2**20:.0f} MiB (one 1024 MiB line)")
            cases.append(
                ("re-render, 1 GiB log line", [sys.executable, "-m", "afbench.report", str(out)])
            )
        if "gzip" in args.cases:
            if not gz.is_file():
                bomb(gz, 6 << 30)
            print(f"input: gzip {gz.stat().st_size / 2**20:.1f} MiB -> 6144 MiB")
            cases.append(("gzip trace 6 MiB -> 6 GiB", [sys.executable, "-c", READ_TRACE, str(gz)]))
        if {"trace", "trace-render"} & set(args.cases):
            if not view.is_file():
                view.parent.mkdir(parents=True)
                trace_view(view, args.trace_mib << 20)
            events = view.read_bytes().count(b'"aclnnMatmul_MatMulV')
            print(
                f"input: trace_view.json {view.stat().st_size / 2**20:.0f} MiB, {events} kernel "
                "events, each with its host launch and flow"
            )
        mib = f"{args.trace_mib} MiB"
        if "trace" in args.cases:
            cases.append(
                (
                    f"read_trace, trace_view.json {mib}",
                    [sys.executable, "-c", READ_TRACE, str(view)],
                )
            )
            profile = root / "profile"
            cases.append(
                (f"op table, trace_view.json {mib}", [sys.executable, "-c", OP_TABLE, str(profile)])
            )
        if "trace-render" in args.cases:
            shown = root / "render" / "out"
            if not (shown / "report.md").is_file():
                (root / "render").mkdir(exist_ok=True)
                experiment(root / "render")
                held = (
                    next(shown.glob("runs/*"))
                    / "profile"
                    / "x_ascend_pt"
                    / "ASCEND_PROFILER_OUTPUT"
                )
                held.mkdir(parents=True)
                os.link(view, held / "trace_view.json")
            cases.append(
                (
                    f"re-render, trace_view.json {mib} in a run's profile/",
                    [sys.executable, "-m", "afbench.report", str(shown)],
                )
            )
        rss, _, _, _ = measure(after, [sys.executable, "-c", IMPORTS], root)
        print(f"floor: the imports alone peak at {rss:.0f} MiB RSS")
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
