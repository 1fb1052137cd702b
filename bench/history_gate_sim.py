"""The history gate against known truth (issue 30, item 3): ``python -m afbench.history check``
with the record (one experiment, one night) as the unit.

    python bench/history_gate_sim.py [--n 1000] [--month-n 200] [--cp-n 300] [--cli 5]
                                     [--seed 1] [--quick] [--only 12345f]

A nightly series: night j's host level ``b_j ~ N(0, night)`` (log scale), each of the record's
``runs`` runs ``+ e ~ N(0, run)``, each run 5 measured steps of 10 ms x exp(level + run +
N(0, 1%)). The newest night adds the truth (0: an unchanged program; 5% or 10% slower). The
gate is afbench's public function (:func:`afbench.history.check.compare_history` with the
runs' records, i.e. :func:`afbench.verdict.compare_records`) and its rule
(:func:`afbench.history.check.is_regression`, threshold 5%), against the default window of
10 earlier records; beside it, the runs judged as independent draws (``compare_history``
without records: the gate before issue 30).

1. Per cell (1/3/5 runs per record x 0/1/3/5% night spread x 2/4% run spread): the share of
   unchanged nights failed (false alarms) and of 5% / 10% steps caught on their first night.
2. Few records (1-4 earlier, 5 runs, 3% run spread): the fallback with its assumed 3% night
   spread, at 0/3/5% true night spread.
3. A month: 30 nightly checks of an unchanged program (records 11-40, window 10): the share
   of months with at least one false alarm.
4. The trend page's change points (:func:`afbench.history.trend.change_points`) on 30
   records (5 runs, 3% run spread) whose night level is AR(1) with coefficient 0/0.5/0.8 and
   sd 3%: series with a change point where there is none, and a 10% step at record 16 found
   (a change point within one record of it); decorrelated (now) against PELT on the series
   with its lag-1 scale (before).
5. The CLI agrees: ``--cli`` series per sampled cell written to a SQLite database through
   afbench.history.records.write, and ``python -m afbench.history check`` run on each; its
   exit status against the function's decision.
f. (``--only f``) The done-when cell of issue 30 alone (5 runs per record, 3% night spread, 3%
   run spread): its false alarms and 10% catch over ``--n`` series.

Prints tables and the agreement; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

import _common as C
from afbench.history.check import compare_history, is_regression
from afbench.history.trend import change_points

STEPS = 5
WINDOW = 10
THRESHOLD = 5.0
T0 = datetime(2026, 11, 1, 2, 0)


def night_runs(
    rng: np.random.Generator, level: float, runs: int, run_sd: float
) -> list[list[float]]:
    """One record's runs: step times (s) at log level ``level``."""
    out = []
    for _ in range(runs):
        r = level + rng.normal(0, run_sd)
        out.append(list(0.01 * np.exp(r + rng.normal(0, 0.01, STEPS))))
    return out


def series(
    rng,
    n: int,
    runs: int,
    night: float,
    run_sd: float,
    step_pct: float = 0.0,
    rho: float = 0.0,
    step_at: int | None = None,
) -> list[list[list[float]]]:
    """``n`` records, oldest first; from ``step_at`` (default: the newest only) ``step_pct``
    slower. Night levels AR(1) with coefficient ``rho`` and marginal sd ``night``."""
    step_at = n - 1 if step_at is None else step_at
    level, out = rng.normal(0, night), []
    for j in range(n):
        if j:
            level = rho * level + rng.normal(0, night * math.sqrt(1 - rho**2))
        shift = math.log(1 + step_pct / 100) if j >= step_at else 0.0
        out.append(night_runs(rng, level + shift, runs, run_sd))
    return out


def gate(
    history: list[list[list[float]]],
    newest: list[list[float]],
    records: bool = True,
    confidence: float = 0.95,
) -> bool:
    """The check's decision (a regression?) on ``history`` (records) and ``newest``."""
    flat = [run for rec in history for run in rec]
    keys = [k for k, rec in enumerate(history) for _ in rec] if records else None
    return is_regression(
        compare_history(flat, newest, history_record=keys, confidence=confidence), THRESHOLD
    )


def cells_table(rng, n: int, quick: bool) -> None:
    print(
        f"\n## 1. Per check, {WINDOW} earlier records, threshold {THRESHOLD:g}%: % of "
        f"nights failed ({n} series per cell)"
    )
    print(
        "| runs/record | night spread | run spread | unchanged: records (now) | unchanged: "
        "runs as independent (before) | 5% step, first night | 10% step, first night |"
    )
    print("|---|---|---|---|---|---|---|")
    for runs in (1, 3, 5):
        for night in (0.0, 1.0, 3.0, 5.0):
            for run_sd in (3.0,) if quick else (2.0, 4.0):
                hits = {"aa": 0, "old": 0, 5: 0, 10: 0}
                for _ in range(n):
                    s = series(rng, WINDOW + 1, runs, night / 100, run_sd / 100)
                    hits["aa"] += gate(s[:-1], s[-1])
                    hits["old"] += gate(s[:-1], s[-1], records=False)
                    for step in (5, 10):
                        s = series(rng, WINDOW + 1, runs, night / 100, run_sd / 100, step)
                        hits[step] += gate(s[:-1], s[-1])
                pct = {k: 100 * v / n for k, v in hits.items()}
                print(
                    f"| {runs} | {night:g}% | {run_sd:g}% | {pct['aa']:.1f} | "
                    f"{pct['old']:.1f} | {pct[5]:.1f} | {pct[10]:.1f} |"
                )
            sys.stdout.flush()


def focus(rng, n: int) -> None:
    """The done-when cell of issue 30 alone, with more series: 5 runs per record, 3% night
    spread, 3% run spread."""
    aa = caught = 0
    for _ in range(n):
        s = series(rng, WINDOW + 1, 5, 0.03, 0.03)
        aa += gate(s[:-1], s[-1])
        s = series(rng, WINDOW + 1, 5, 0.03, 0.03, 10)
        caught += gate(s[:-1], s[-1])
    se = 100 * math.sqrt(max(aa, 1) / n * (1 - aa / n) / n)
    print(
        f"\n## Focus: 5 runs/record, 3% night spread, 3% run spread, {WINDOW} earlier "
        f"records, {n} series: unchanged failed {100 * aa / n:.2f}% (SE {se:.2f}), a 10% "
        f"step caught on its first night {100 * caught / n:.1f}%"
    )


def few_records_table(rng, n: int) -> None:
    print(
        f"\n## 2. Few earlier records (5 runs/record, 3% run spread; below 5 records the "
        f"gate assumes a 3% night spread): % failed ({n} series per cell)"
    )
    print("| earlier records | night spread | unchanged | 10% step, first night |")
    print("|---|---|---|---|")
    for k in (1, 2, 3, 4, 5):
        for night in (0.0, 3.0, 5.0):
            aa = step = 0
            for _ in range(n):
                s = series(rng, k + 1, 5, night / 100, 0.03)
                aa += gate(s[:-1], s[-1])
                s = series(rng, k + 1, 5, night / 100, 0.03, 10)
                step += gate(s[:-1], s[-1])
            print(f"| {k} | {night:g}% | {100 * aa / n:.1f} | {100 * step / n:.1f} |")
        sys.stdout.flush()


def month_table(rng, n: int) -> None:
    print(
        f"\n## 3. A month of nightly checks of an unchanged program (30 checks, window "
        f"{WINDOW}, 3% run spread), at --confidence 0.95 (the default) and 0.99: % of months "
        f"with a false alarm ({n} months per cell), and a 10% step's first night"
    )
    print(
        "| runs/record | night spread | months with >= 1 false alarm, 0.95 | checks failed, "
        "0.95 | months with >= 1 false alarm, 0.99 | 10% step, first night, 0.99 |"
    )
    print("|---|---|---|---|---|---|")
    for runs in (1, 5):
        for night in (0.0, 1.0, 3.0, 5.0):
            months = checks = months99 = caught99 = 0
            for _ in range(n):
                s = series(rng, WINDOW + 30, runs, night / 100, 0.03)
                fails = [j for j in range(WINDOW, WINDOW + 30) if gate(s[j - WINDOW : j], s[j])]
                months += bool(fails)
                checks += len(fails)
                # a regression at 0.99 is one at 0.95: only those nights need a second look
                months99 += any(gate(s[j - WINDOW : j], s[j], confidence=0.99) for j in fails)
                s = series(rng, WINDOW + 1, runs, night / 100, 0.03, 10)
                caught99 += gate(s[:-1], s[-1], confidence=0.99)
            print(
                f"| {runs} | {night:g}% | {100 * months / n:.1f} | "
                f"{100 * checks / (30 * n):.2f} | {100 * months99 / n:.1f} | "
                f"{100 * caught99 / n:.1f} |"
            )
            sys.stdout.flush()


def record_medians(s: list[list[list[float]]]) -> list[float]:
    """Each record's median step time as the history stores it: the median of its runs'
    median step times."""
    return [float(np.median([np.median(run) for run in rec])) for rec in s]


def change_point_table(rng, n: int) -> None:
    print(
        f"\n## 4. Change points on 30 records (5 runs, 3% run spread, night level AR(1) sd "
        f"3%): % of series ({n} per cell)"
    )
    print(
        "| AR(1) coefficient | no change: series with a change point, decorrelated (now) | "
        "not (before) | 10% step found, decorrelated | not |"
    )
    print("|---|---|---|---|---|")
    for rho in (0.0, 0.3, 0.5, 0.8):
        fa = {True: 0, False: 0}
        found = {True: 0, False: 0}
        for _ in range(n):
            flat = record_medians(series(rng, 30, 5, 0.03, 0.03, rho=rho))
            stepped = record_medians(series(rng, 30, 5, 0.03, 0.03, 10, rho=rho, step_at=15))
            for how in fa:
                fa[how] += bool(change_points(flat, decorrelated=how))
                found[how] += any(
                    abs(i - 15) <= 1 for i in change_points(stepped, decorrelated=how)
                )
        print(
            f"| {rho:g} | {100 * fa[True] / n:.1f} | {100 * fa[False] / n:.1f} | "
            f"{100 * found[True] / n:.1f} | {100 * found[False] / n:.1f} |"
        )
        sys.stdout.flush()


def write_series(url: str, name: str, s: list[list[list[float]]]) -> None:
    """Write ``s`` as records of experiment ``name`` (one variant, ``base``), a night apart."""
    from afbench.history.db import open_db
    from afbench.history.records import Extracted, VariantRows, write

    engine = open_db(url, create=True)
    for j, rec in enumerate(s):
        when = T0 + timedelta(days=j)
        exp = {
            "out_dir": f"/sim/{name}/{j}",
            "experiment": name,
            "created_at": when,
            "recorded_at": when,
            "source": "import",
            "baseline": "base",
            "verdict_phase": "train",
            "repeats": str(len(rec)),
            "n_runs": len(rec),
            "n_failed": 0,
            "versions": {"torch": "2.13.0"},
            "host_id": "sim",
            "git_commit": f"{j:040x}",
        }
        run_rows = [
            {
                "run_id": f"base-train-r{k + 1}",
                "repeat": k + 1,
                "status": "OK",
                "median_step_s": float(np.median(t)),
                "mean_step_s": float(np.mean(t)),
                "n_steps": len(t),
                "step_times_s": [float(x) for x in t],
            }
            for k, t in enumerate(rec)
        ]
        row = {
            "variant": "base",
            "is_baseline": True,
            "config_hash": "cfg",
            "verdict": "BASELINE",
            "gain_pct": None,
            "ci_low_pct": None,
            "ci_high_pct": None,
            "decision": None,
            "median_step_s": float(np.median([r["median_step_s"] for r in run_rows])),
            "n_runs_ok": len(rec),
            "report_path": None,
        }
        assert write(engine, Extracted(exp, [VariantRows(row, run_rows)]))
    engine.dispose()


def cli_agreement(rng, per_cell: int) -> None:
    cells = [
        (runs, night, step) for runs in (1, 5) for night in (0.0, 3.0, 5.0) for step in (0, 10)
    ]
    agree = total = 0
    with tempfile.TemporaryDirectory(prefix="afbench-gate-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'h.sqlite'}"
        for c, (runs, night, step) in enumerate(cells):
            for k in range(per_cell):
                # a few-records case too: every other series has 3 earlier records
                n_hist = WINDOW if k % 2 == 0 else 3
                s = series(rng, n_hist + 1, runs, night / 100, 0.03, step)
                name = f"sim_{c}_{k}"
                write_series(url, name, s)
                want = gate(s[:-1], s[-1])
                proc = subprocess.run(
                    [
                        C.PYTHON,
                        "-m",
                        "afbench.history",
                        "--url",
                        url,
                        "check",
                        "--experiment",
                        name,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
                got = {0: False, 1: True}.get(proc.returncode)
                total += 1
                agree += got == want
                if got != want:
                    print(
                        f"DISAGREE {name} runs={runs} night={night} step={step}: function "
                        f"{want}, CLI exit {proc.returncode}: {proc.stdout.strip()[:300]}"
                        f"{proc.stderr.strip()[-300:]}"
                    )
    print(
        f"\n## 5. CLI agreement: `python -m afbench.history check` on SQLite databases of "
        f"simulated records agrees with the function in {agree} of {total} series "
        f"({len(cells)} cells x {per_cell}; runs 1/5, night 0/3/5%, truth 0/10%, 10 or 3 "
        f"earlier records)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1000, help="series per cell (tables 1-2)")
    p.add_argument("--month-n", type=int, default=200, help="months per cell (table 3)")
    p.add_argument("--cp-n", type=int, default=300, help="series per cell (table 4)")
    p.add_argument("--cli", type=int, default=5, help="CLI series per sampled cell (0: none)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="one run spread (3%%) in table 1")
    p.add_argument("--only", default="12345", help="which tables, e.g. 15; f: the focus cell")
    args = p.parse_args()
    t0 = time.perf_counter()
    C.header("history_gate_sim")
    rng = np.random.default_rng(args.seed)
    if "f" in args.only:
        focus(rng, args.n)
    if "1" in args.only:
        cells_table(rng, args.n, args.quick)
    if "2" in args.only:
        few_records_table(rng, args.n)
    if "3" in args.only:
        month_table(rng, args.month_n)
    if "4" in args.only:
        change_point_table(rng, args.cp_n)
    if "5" in args.only and args.cli:
        cli_agreement(rng, args.cli)
    C.footer(t0)


if __name__ == "__main__":
    main()
