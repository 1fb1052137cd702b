"""Benchmark: an A/A round whose baseline run shares the CPU never yields a winner.

The case of issue 20: two identical variants of the command engine's matmul worker
(bench/workers/matmul_steps.py), where the baseline's own command starts two busy loops beside
its steps (``AFBENCH_BENCH_BUSY=2``), the way a run shares a machine with another job. Run
through the real pipeline (``python -m afbench``) at one round and at three rounds, each
``--trials`` times, with the shipped defaults (``experiment.rerun_contended=1``: the contended
baseline run is rerun once, contended again, and its round is set aside), once without and once
with a host calibration (an A/A of 12 quiet rounds recorded first, in a private history
database). Printed per design: the verdicts, how many named a winner (the target is none), and
the verdict line of the first trial. The reference's quick verdict is printed beside it: the
rule a hand-written script applies.

    .venv/bin/python bench/contended_aa.py [--trials 3] [--steps 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import _common as C
from afbench.store import read_summary

WORKER = C.WORKERS / "matmul_steps.py"


#: Every run gets the same command and environment (one kind of run for the host calibration:
#: afbench.history.calibration.run_kind); the worker starts its busy loops in variant a's runs
#: only (matmul_steps.py), as another job sharing the machine would.
BUSY_ENV = {"AFBENCH_BENCH_BUSY": "2", "AFBENCH_BENCH_BUSY_VARIANT": "a"}


def recipe(work: Path, name: str, variants: dict, rounds: int, steps: int) -> Path:
    train = {"scheduler": {"steps": steps, "measure": {"first_step": 3, "last_step": steps}}}
    return C.write_recipe(
        work,
        name,
        variants,
        {"train": train},
        rounds=rounds,
        extra=C.command_engine(WORKER, "{steps}", "150", env=BUSY_ENV),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--keep", help="keep the scratch folder here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    C.header("contended_aa", argv)
    work = C.scratch_dir(args.keep, "contended_aa")
    import os

    os.environ["AFBENCH_HISTORY_URL"] = f"sqlite:///{work / 'history.sqlite'}"
    contended = {"a": {}, "a_again": {}}  # a's runs are loaded (BUSY_ENV)
    quiet = {"q": {}, "q_again": {}}  # the calibration's A/A: no variant a, no load
    named = 0
    for calibrated in (False, True):
        if calibrated:
            recipes = recipe(work, "calibrate", quiet, 12, args.steps)
            _, _, out = C.run_afbench_out(work, recipes, "experiment=calibrate")
            c = read_summary(out / "summary.json").comparisons[0]
            print(
                f"calibration (A/A, 12 quiet rounds): run-to-run spread "
                f"{c.speed.spread_pct / 2**0.5:.2f}% on {c.speed.n_pairs} rounds, "
                f"{len(c.speed.set_aside)} set aside"
            )
        for rounds in (1, 3):
            recipes = recipe(work, f"aa_r{rounds}", contended, rounds, args.steps)
            verdicts, lines = [], []
            for _ in range(args.trials):
                _, _, out = C.run_afbench_out(work, recipes, f"experiment=aa_r{rounds}")
                (c,) = read_summary(out / "summary.json").comparisons
                verdicts.append(c.verdict)
                lines.append(f"{c.verdict_line} | reference: {c.speed.reference_verdict or '-'}")
            winners = sum(v.endswith(("_FASTER", "_SLOWER")) for v in verdicts)
            named += winners
            label = f"{'calibrated' if calibrated else 'uncalibrated'}, verdict.rounds={rounds}"
            print(
                f"{label:<28} verdicts {verdicts}: {winners} named a winner "
                f"{C.verdict_mark(winners == 0)}"
            )
            print(f"{'':<28} first: {lines[0]}")
    print(
        f"target: a contended A/A round never yields a winner: "
        f"{C.verdict_mark(named == 0)} ({named} winners)"
    )
    C.cleanup(work, args.keep)
    C.footer(t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
