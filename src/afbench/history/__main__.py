"""``python -m afbench.history [--url URL] import | list | report | check``: the history
database of experiments (docs/history.md).

    import DIR...                       record output / sweep directories (idempotent)
    list [--experiment E] [--variant V] [--since DATE] [--limit N]
    report [--experiment E] [-o FILE.html]   HTML + Markdown (FILE.md) with trend plots
    check --experiment E [--variant V] [--window N] [--threshold-pct P] [--contention keep]
          [--night-spread-pct S]
                                        exit 1 on a slowdown the noise cannot explain
                                        (runs recorded as contended never decide)
    calibration list | show KIND | forget KIND
                                        this host's calibration per kind of run: when,
                                        on how many rounds, from which experiments

Exit status: 0 done (check: no regression), 1 check found a regression or a newest record
whose runs failed (or import could not read a directory), 2 a usage error, an unknown experiment
(list, report, check), a report that
cannot be written, or a database that cannot be opened. Never imports torch.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError

import afbench.switches.registry  # noqa: F401  (hands the switch names to afbench.config)
from afbench.errors import AfbenchError
from afbench.history.db import ENV_URL, open_db, resolve_url, shown
from afbench.history.schema import experiments, records, runs
from afbench.verdict import DEFAULT_NIGHT_SPREAD_PCT, MIN_RECORDS


def _number(text: str, ok, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text} must be {what}")
    return value


def _open_unit(text: str) -> float:
    return _number(text, lambda v: 0 < v < 1, "within (0, 1), e.g. 0.95")


def _percent(text: str) -> float:
    return _number(text, lambda v: 0 < v < 100, "a percentage within (0, 100), e.g. 5")


def _spread(text: str) -> float:
    return _number(text, lambda v: 0 <= v < 100, "a percentage within [0, 100), e.g. 3")


def _positive_int(text: str) -> int:
    value = _number(text, lambda v: v >= 1 and v == int(v), "a whole number >= 1")
    return int(value)


def _url(text: str) -> str:
    if not text.strip():  # `--url "$UNSET"` must not fall back to another database
        raise argparse.ArgumentTypeError(
            f"is empty: give a SQLAlchemy URL, or leave --url out "
            f"for ${ENV_URL} or the per-user SQLite file"
        )
    return text


def _since(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO date or time, e.g. 2026-12-01 or 2026-12-01T08:00 (UTC) "
            "or 2026-12-01T08:00+02:00"
        ) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m afbench.history",
        description="The history of afbench experiments: record, "
        "list, report trends, gate regressions.",
        epilog="exit status: 0 done (check: no regression), 1 check "
        "found a regression or import could not read a directory, 2 a "
        "usage error, an unknown experiment or an unreachable "
        "database. Each command's --help gives its options.",
    )
    p.add_argument(
        "--url",
        type=_url,
        help=f"SQLAlchemy URL of the database (default: ${ENV_URL}, else the per-user SQLite file)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="record existing output and sweep directories")
    imp.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="an experiment's output directory, or a folder above some (outputs/, "
        "multirun/): each finished one below is recorded once",
    )
    ls = sub.add_parser("list", help="one line per record, newest first")
    ls.add_argument("--experiment", help="only this experiment (experiment.name)")
    ls.add_argument("--variant", help="only this variant")
    ls.add_argument(
        "--since",
        type=_since,
        metavar="DATE",
        help="records created on or after DATE (ISO, UTC unless it has an offset: "
        "2026-12-01, 2026-12-01T08:00 or 2026-12-01T08:00+02:00)",
    )
    ls.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        metavar="N",
        help="at most N lines (the newest)",
    )
    rep = sub.add_parser("report", help="HTML and Markdown trend report")
    rep.add_argument("--experiment", help="only this experiment (default: all)")
    rep.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("history_report.html"),
        metavar="FILE.html",
        help="the HTML file; the Markdown goes beside it (FILE.md); default history_report.html",
    )
    chk = sub.add_parser(
        "check",
        help="CI gate: exit 1 when the newest record is slower than its history beyond the noise",
        description="Compare the newest record of each variant with its "
        "earlier records (same host, same config). Exit 0: no regression (or "
        "nothing to compare; the line says so), 1: a regression, or a newest "
        "record whose runs failed, 2: no record "
        "of the experiment or variant.",
    )
    chk.add_argument("--experiment", required=True, help="the experiment (experiment.name)")
    chk.add_argument("--variant", help="only this variant (default: each of them)")
    chk.add_argument(
        "--window",
        type=_positive_int,
        default=10,
        help="earlier records compared with (default 10)",
    )
    chk.add_argument(
        "--confidence",
        type=_open_unit,
        default=0.95,
        help="confidence of the interval, within (0, 1) (default 0.95)",
    )
    chk.add_argument(
        "--min-gain-pct",
        type=_percent,
        default=2.0,
        help="the smallest change that matters, for the verdict's NO_GAIN margin (default 2)",
    )
    chk.add_argument(
        "--threshold-pct",
        type=_percent,
        default=5.0,
        help="a significant slowdown smaller than this passes (default 5)",
    )
    chk.add_argument(
        "--contention",
        choices=("set_aside", "keep"),
        default="set_aside",
        help="runs recorded as contended: set_aside (default: they never decide, "
        "and the line names them) or keep (a machine that is always shared)",
    )
    chk.add_argument(
        "--night-spread-pct",
        type=_spread,
        default=DEFAULT_NIGHT_SPREAD_PCT,
        help=f"night-to-night spread of the host assumed while there are fewer "
        f"than {MIN_RECORDS} earlier records (default {DEFAULT_NIGHT_SPREAD_PCT:g}; "
        f"with {MIN_RECORDS} or more the records' own spread is used)",
    )
    cal = sub.add_parser(
        "calibration", help="this host's calibration: list, show or forget a kind of run"
    )
    cal.add_argument("action", choices=("list", "show", "forget"))
    cal.add_argument("kind", nargs="?", help="the kind of run (show, forget; list names them)")
    return p


def _import_targets(dirs: list[Path]) -> tuple[list, bool, int | None]:
    """(the finished experiment directories below ``dirs``, whether one of ``dirs`` is
    missing and that fails the import (never: one missing beside others is a note), the exit
    status when there is nothing to import: 2 when every one is missing, 1 when none holds
    an experiment), each problem printed; read before any database is opened, so nothing is
    created for nothing to import."""
    from afbench.store import experiment_dirs

    missing = [d for d in dirs if not d.exists()]
    if len(missing) == len(dirs):
        for d in missing:
            print(f"history import: {d}: no such directory", file=sys.stderr)
        return [], True, 2
    for d in missing:  # `import outputs/ multirun/` before the first sweep made multirun/
        print(f"history import: {d}: no such directory (yet): skipped")
    found = experiment_dirs([d for d in dirs if d.exists()])
    if not found:
        print(
            "history import: no finished experiment (plan.json + summary.json) below "
            + ", ".join(map(str, dirs))
            + "; nothing recorded (the database was not "
            "opened)",
            file=sys.stderr,
        )
        return [], False, 1
    return found, False, None


def cmd_import(engine: Engine, found: list, missing: bool) -> int:
    """Record each of ``found`` (:func:`_import_targets`) not recorded yet. A directory whose
    files do not fit their schema (:func:`afbench.history.records.extract` reads them through
    :mod:`afbench.store`, the report's validation: a hand-edited calibration value in
    experiment.json too) is one line naming the file and the key, and is skipped: the other
    directories are recorded, nothing recorded before is touched, and the exit status is 1."""
    from afbench.history.records import extract, is_recorded, write

    new = skipped = failed = 0
    for out in found:
        if is_recorded(engine, out.path):
            skipped += 1
            continue
        try:
            ok = write(engine, extract(out, source="import"))
        except AfbenchError as exc:
            print(
                f"history import: {exc}; {out.path} not recorded (correct or restore that "
                "file, then import it again)",
                file=sys.stderr,
            )
            failed += 1
            continue
        new += ok
        skipped += not ok
        if ok:
            print(f"recorded {out.path}")
    print(f"history import: {new} recorded, {skipped} already recorded, {failed} unreadable")
    return 1 if failed or missing else 0


def list_lines(
    engine: Engine,
    experiment: str | None = None,
    variant: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> list[str]:
    """``list``'s lines, newest first: time, experiment/variant, median step, gain [CI],
    verdict, runs (and how many were recorded as contended), software, output directory."""
    from afbench.history.check import software

    contended = (
        select(func.count())
        .select_from(runs)
        .where(runs.c.record_id == records.c.id, runs.c.status == "OK", runs.c.contended.is_(True))
        .scalar_subquery()
        .label("n_contended")
    )
    q = (
        select(
            records,
            experiments.c.experiment,
            experiments.c.created_at,
            experiments.c.out_dir,
            experiments.c.versions,
            experiments.c.git_commit,
            experiments.c.cann,
            contended,
        )
        .join(experiments, records.c.experiment_id == experiments.c.id)
        .order_by(experiments.c.created_at.desc(), records.c.id.desc())
    )
    if experiment:
        q = q.where(experiments.c.experiment == experiment)
    if variant:
        q = q.where(records.c.variant == variant)
    if since:  # created_at is naive UTC: an offset given is converted, not dropped
        if since.tzinfo:
            since = since.astimezone(timezone.utc).replace(tzinfo=None)
        q = q.where(experiments.c.created_at >= since)
    if limit:
        q = q.limit(limit)
    lines = []
    with engine.connect() as conn:
        for r in conn.execute(q):
            step = f"{r.median_step_s * 1e3:9.3f} ms" if r.median_step_s else "      n/a   "
            if r.is_baseline:
                gain = "baseline"
            elif r.gain_pct is None:
                gain = "gain n/a"
            else:
                gain = f"gain {r.gain_pct:+.2f}%"
                if r.ci_low_pct is not None and r.ci_high_pct is not None:
                    gain += f" [{r.ci_low_pct:+.2f}%, {r.ci_high_pct:+.2f}%]"
            lines.append(
                f"{r.created_at:%Y-%m-%d %H:%M:%S}  {r.experiment}/{r.variant}  {step}"
                f"  {gain}  {r.verdict or ''}  {r.n_runs_ok} run(s)"
                f"{f' ({r.n_contended} contended)' if r.n_contended else ''}  "
                f"{software(r._mapping)}  {r.out_dir}"
            )
    return lines


def _known_experiment(engine: Engine, name: str) -> str | None:
    """None when ``name`` has records, else the error message (with a did-you-mean)."""
    with engine.connect() as conn:
        names = list(conn.execute(select(experiments.c.experiment).distinct()).scalars())
    if name in names:
        return None
    close = difflib.get_close_matches(name, names, n=1)
    hint = (
        f"; did you mean {close[0]}?"
        if close
        else (
            f"; recorded: {', '.join(sorted(names)[:10])}" if names else "; the database is empty"
        )
    )
    return f"no record of experiment {name!r}{hint}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    url = resolve_url(args.url)
    if args.command == "import":
        found, missing, status = _import_targets(args.dirs)
        if status is not None:
            return status
    try:
        engine = open_db(url, create=args.command == "import")
    except AfbenchError as exc:
        print(f"history: {exc}", file=sys.stderr)
        return exc.exit_code
    try:
        if args.command == "import":
            return cmd_import(engine, found, missing)
        if args.command == "calibration":
            from afbench.history.calibration_cli import cmd_calibration

            return cmd_calibration(engine, args.action, args.kind)
        if args.experiment and (problem := _known_experiment(engine, args.experiment)):
            print(f"history {args.command}: {problem} in {shown(url)}", file=sys.stderr)
            return 2
        if args.command == "list":
            for line in list_lines(engine, args.experiment, args.variant, args.since, args.limit):
                print(line)
            return 0
        if args.command == "report":
            from afbench.history.page import render_history
            from afbench.history.trend import load_series

            series = load_series(engine, args.experiment)
            title = f"afbench history: {args.experiment or 'all experiments'}"
            try:
                html, md = render_history(series, args.output, title)
            except OSError as exc:  # a folder, a read-only place: one line, not a traceback
                print(
                    f"history report: cannot write {args.output}: "
                    f"{exc.strerror or exc}; give -o a writable FILE.html",
                    file=sys.stderr,
                )
                return 2
            print(
                f"history report: {html} and {md} "
                f"({sum(len(s.records) for s in series)} records, {len(series)} series)"
            )
            return 0
        from afbench.history.check import check

        results = check(
            engine,
            args.experiment,
            args.variant,
            window=args.window,
            confidence=args.confidence,
            min_gain_pct=args.min_gain_pct,
            threshold_pct=args.threshold_pct,
            contention=args.contention,
            night_spread_pct=args.night_spread_pct,
        )
        if not results:
            with engine.connect() as conn:
                known = sorted(
                    conn.execute(
                        select(records.c.variant)
                        .distinct()
                        .join(experiments)
                        .where(experiments.c.experiment == args.experiment)
                    ).scalars()
                )
            print(
                f"history check: no record of variant {args.variant!r} of "
                f"{args.experiment} in {shown(url)}; recorded: {', '.join(known)}",
                file=sys.stderr,
            )
            return 2
        for r in results:
            print(r.line)
        return 1 if any(r.regression for r in results) else 0
    except SQLAlchemyError as exc:  # a damaged file: one line, exit 2 (1 is check's REGRESSION)
        print(
            f"history {args.command}: {shown(url)} cannot be read: "
            f"{str(exc.orig if getattr(exc, 'orig', None) else exc).splitlines()[0]}; "
            "restore it from a copy, or give --url (or $AFBENCH_HISTORY_URL) another "
            "database",
            file=sys.stderr,
        )
        return 2
    finally:
        engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
