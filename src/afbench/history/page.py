"""``history report``: an HTML page and a Markdown file of every series
(:class:`afbench.history.trend.Series`): step time and gain over time and over software
versions, with their intervals, each point linked to its experiment's report, and the change
points found.

Plots are matplotlib SVG inlined in the page, drawn with the experiment report's style
(:mod:`afbench.report.plots`). The x axis is the record's place in time (oldest left);
its labels give the date, and the software (torch, torch_npu, CANN, git commit) where it
changed from the record before. Step time: the median of the runs' median step times, bars
from the lowest to the highest run median (one run: no bar). Gain: the variant against its
experiment's baseline, bars the verdict's interval. A dashed line marks a change point.
"""

from __future__ import annotations

import html
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2

from afbench.history.check import software
from afbench.history.trend import MIN_SIZE, Series
from afbench.io import write_text_atomic
from afbench.report.figure import (
    BASELINE_COLOUR,
    GAIN_DOWN,
    GAIN_UP,
    PALETTE,
    WIDE_IN,
    Plot,
    _figure,
    _margins,
    _matplotlib,
    _svg,
)

MAX_TICKS = 12
TABLE_ROWS = 50  # newest records listed per series; the plot shows them all
TEMPLATES = Path(__file__).parent / "templates"


def _link(path: str | None, base: Path) -> str | None:
    if not path:
        return None
    try:
        return os.path.relpath(path, base)
    except ValueError:  # another drive (Windows)
        return Path(path).as_uri()


def _ticks(s: Series, xs: list[int], recs: list[dict[str, Any]]) -> tuple[list[int], list[str]]:
    """At most MAX_TICKS labelled positions, always the first, the last and every change."""
    n = len(xs)
    every = max(1, math.ceil(n / MAX_TICKS))
    # regular ticks, none so close to the last one that their labels overlap
    want = {i for i in range(0, n, every) if n - 1 - i >= every / 2 or i == 0} | {0, n - 1}
    changed = {recs.index(c.after) for c in s.changes if c.after in recs}
    want |= changed
    labels = []
    for i in sorted(want):
        r = recs[i]
        text = f"{r['created_at']:%m-%d %H:%M}"
        if i in changed or i == 0 or software(r) != software(recs[i - 1]):
            text += "\n" + software(r).replace(", ", "\n")[:60]
        labels.append(text)
    return sorted(want), labels


def _plot(s: Series, base: Path, what: str) -> Plot:
    """``what``: ``step`` (median step time, ms) or ``gain`` (percent, with the interval)."""
    key = "median_step_s" if what == "step" else "gain_pct"
    recs = [r for r in s.records if r.get(key) is not None]
    if not recs:
        return Plot(
            note="no record with a number"
            if what == "step"
            else "no gain: the baseline, or no comparison recorded"
        )
    matplotlib, _, style = _matplotlib()
    with matplotlib.rc_context(style):
        fig = _figure(WIDE_IN, 3.0)
        ax = fig.add_subplot()
        _margins(fig, left=0.8, right=0.2, bottom=1.0, top=0.15)
        xs = list(range(len(recs)))
        if what == "step":
            ys = [r[key] * 1e3 for r in recs]
            lo = [y - min(r["run_medians_s"] or [r[key]]) * 1e3 for y, r in zip(ys, recs)]
            hi = [max(r["run_medians_s"] or [r[key]]) * 1e3 - y for y, r in zip(ys, recs)]
            colour = BASELINE_COLOUR if s.is_baseline else PALETTE[0]
            ax.set_ylabel("median step time (ms)")
        else:
            ys = [r[key] for r in recs]
            lo = [
                y - r["ci_low_pct"] if r["ci_low_pct"] is not None else 0 for y, r in zip(ys, recs)
            ]
            hi = [
                r["ci_high_pct"] - y if r["ci_high_pct"] is not None else 0
                for y, r in zip(ys, recs)
            ]
            colour = "#0f172a"
            ax.axhline(0, color="#334155", linewidth=1.0)
            ax.set_ylabel("gain vs baseline (%)")
        ax.errorbar(
            xs,
            ys,
            yerr=[lo, hi],
            fmt="-",
            color="#94a3b8",
            ecolor="#64748b",
            elinewidth=0.9,
            capsize=2.5,
            linewidth=0.8,
            zorder=1,
        )
        colours = (
            [
                GAIN_UP
                if (r["decision"] == "FASTER")
                else GAIN_DOWN
                if r["decision"] == "SLOWER"
                else colour
                for r in recs
            ]
            if what == "gain"
            else colour
        )
        points = ax.scatter(xs, ys, s=22, c=colours, zorder=2)
        points.set_urls([_link(r["report_path"], base) for r in recs])
        for c in s.changes:
            if c.after in recs:
                ax.axvline(
                    recs.index(c.after) - 0.5, color="#dc2626", linestyle="--", linewidth=1.0
                )
        ticks, labels = _ticks(s, xs, recs)
        ax.set_xticks(ticks, labels, fontsize=7)
        ax.set_xlim(-0.6, len(recs) - 0.4)
        return Plot(svg=_svg(fig))


def _row(r: dict[str, Any], base: Path) -> dict[str, Any]:
    def pct(x: Any) -> str:
        return f"{x:+.2f}%" if x is not None else "n/a"

    gain = pct(r["gain_pct"])
    if r["ci_low_pct"] is not None and r["ci_high_pct"] is not None:
        gain += f" [{pct(r['ci_low_pct'])}, {pct(r['ci_high_pct'])}]"
    return {
        "when": f"{r['created_at']:%Y-%m-%d %H:%M}",
        "software": software(r),
        "step": f"{r['median_step_s'] * 1e3:.3f} ms" if r["median_step_s"] else "n/a",
        "runs": f"{r['n_runs_ok']}"
        + (f" ({r['n_contended']} contended)" if r.get("n_contended") else ""),
        "gain": gain if not r["is_baseline"] else "baseline",
        "verdict": r["verdict"] or "",
        "report": _link(r["report_path"], base),
        "out_dir": r["out_dir"],
    }


def _no_change(s: Series) -> str:
    """What the page says when a series has no change point: none found, or too few records
    of one host and config (the part change points are looked for in) to look."""
    parts: dict[tuple[Any, Any], int] = {}
    for r in s.records:
        if r["median_step_s"]:
            key = (r["host_id"], r["config_hash"])
            parts[key] = parts.get(key, 0) + 1
    longest = max(parts.values(), default=0)
    if longest >= 2 * MIN_SIZE:
        return "No change point found."
    return (
        f"No change point looked for: it needs {2 * MIN_SIZE} or more records of one host "
        f"and config (here {longest} with a step time)."
    )


def render_history(series: list[Series], out_html: Path, title: str) -> tuple[Path, Path]:
    """Write ``out_html`` and the Markdown beside it (same name, ``.md``); returns both paths.
    Links to each experiment's report are relative to ``out_html``'s folder."""
    out_html = Path(out_html).resolve()
    base = out_html.parent
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["e"] = lambda x: html.escape(str(x))
    groups = []
    for s in series:
        groups.append(
            {
                "experiment": s.experiment,
                "variant": s.variant,
                "baseline": s.is_baseline,
                "n": len(s.records),
                "changes": [c.line() for c in s.changes],
                "no_change": _no_change(s),
                "rows": [_row(r, base) for r in reversed(s.records[-TABLE_ROWS:])],
                "more": max(0, len(s.records) - TABLE_ROWS),
                "step_plot": _plot(s, base, "step"),
                "gain_plot": None if s.is_baseline else _plot(s, base, "gain"),
            }
        )
    ctx = {
        "title": title,
        "groups": groups,
        "generated": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "n_records": sum(len(s.records) for s in series),
    }
    out_md = out_html.with_suffix(".md")
    out_html.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_html, env.get_template("history.html.j2").render(**ctx))
    write_text_atomic(out_md, env.get_template("history.md.j2").render(**ctx))
    return out_html, out_md
