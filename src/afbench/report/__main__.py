"""Offline re-render: ``python -m afbench.report <output dir> [--lang en|zh]``.

Re-collects the run directories, rewrites results/, summary.json and the report. Runs nothing.
Refuses (exit 2, nothing rewritten) when a run folder that summary.json records as run is
missing (a copy with ``runs/<run_id>/`` deleted): re-collecting would replace its stored
outcome with "not run".
The report in the language the directory ran with is report.md / report.html; in another
language it is written beside them as report.<lang>.md / report.<lang>.html (a sweep:
sweep_report.<lang>.md, with every job's report re-rendered in that language and linked).
Templates are the installed ones, or those of --template-dir (rendered in Jinja2's sandbox):
a report.template_dir that the directory's experiment.json names is not used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import afbench.switches.registry  # noqa: F401  (hands the switch names to afbench.config)
from afbench.errors import AfbenchError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m afbench.report", description=__doc__)
    parser.add_argument("out_dir", type=Path, help="an afbench output directory (holds plan.json)")
    parser.add_argument("--lang", choices=["en", "zh"], help="report language (default: as run)")
    parser.add_argument(
        "--template-dir",
        help="a folder of your own report templates "
        "(report.md.j2, sweep.md.j2, ...); default: the installed ones",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="print each verdict's Why under its headline"
    )
    args = parser.parse_args(argv)
    # after argument parsing: --help and usage errors answer without loading pandas
    from afbench.report.render import (
        build_report,
        console_lines,
        report_name,
        run_language,
        stored_report,
    )
    from afbench.store import PLAN, OutDir

    if not args.out_dir.is_dir():
        what = "is not a directory" if args.out_dir.exists() else "does not exist"
        print(f"afbench.report: error: {args.out_dir} {what}", file=sys.stderr)
        return 2
    if not (args.out_dir / PLAN).is_file() and any(args.out_dir.glob(f"*/{PLAN}")):
        from afbench.sweep import build_sweep_report, verdict_lines  # Hydra: sweeps only

        try:
            summary = build_sweep_report(
                args.out_dir, lang=args.lang, template_dir=args.template_dir
            )
        except AfbenchError as exc:
            print(f"afbench.report: error: {exc}", file=sys.stderr)
            return exc.exit_code
        jobs_lang = run_language(next(args.out_dir.glob(f"*/{PLAN}")).parent)
        for line in verdict_lines(summary, args.lang or jobs_lang, args.template_dir):
            print(line)
        name = report_name("sweep_report", "md", args.lang or jobs_lang, jobs_lang)
        print(f"afbench.report: wrote {args.out_dir / name}")
        return 0
    if not (args.out_dir / PLAN).is_file():
        print(
            f"afbench.report: error: {args.out_dir} holds no plan.json; give an afbench output "
            "directory (outputs/<date>/<time>-<experiment>-<pid>)",
            file=sys.stderr,
        )
        return 2
    missing = OutDir(args.out_dir).recorded_runs_missing()
    if missing:  # re-collecting would overwrite their stored verdicts with "not run"
        them = "them" if len(missing) > 1 else "it"
        print(
            f"afbench.report: error: {', '.join(map(str, missing))}: missing, but "
            f"summary.json records {them} as run; restore the folder"
            f"{'s' if len(missing) > 1 else ''} (or re-run with resume={args.out_dir}) "
            "— nothing was rewritten",
            file=sys.stderr,
        )
        return 2
    try:  # a hand-edited or damaged experiment.json is one line naming the file and key
        report = stored_report(args.out_dir).model_copy(
            update={"template_dir": args.template_dir, **({"lang": args.lang} if args.lang else {})}
        )
        stored = OutDir(args.out_dir).experiment().report.template_dir
        if stored and not args.template_dir:  # said, so a missing custom page is no surprise
            print(
                f"afbench.report: note: experiment.json names report.template_dir {stored!r}; "
                "a re-render uses only the templates given with --template-dir",
                file=sys.stderr,
            )
        summary = build_report(args.out_dir, report)
    except AfbenchError as exc:
        print(f"afbench.report: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.lang:  # summary.json keeps the run's own language; the console speaks --lang
        from afbench.report.render import fill_lines

        summary = fill_lines(summary.model_copy(deep=True), report)
    for line in console_lines(summary, report.lang or "en", args.verbose):
        print(line)
    name = report_name("report", "md", report.lang or "en", run_language(args.out_dir))
    print(f"afbench.report: wrote {args.out_dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
