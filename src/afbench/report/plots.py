"""Plots of the HTML report, as inline SVG markup.

Pure functions of the summary (the :class:`afbench.store.Summary` of
:func:`afbench.compare.compare`, read by attribute) and the per-step table (collect's ``steps``,
``results/steps.parquet``). Each returns a
:class:`Plot`: its ``<svg>`` markup, or no markup and a one-line ``note`` saying why it is
omitted, because a partial output directory (no profile, failed runs) is normal, not an error.

matplotlib is used without pyplot (``Figure`` + the SVG printer), imported once on first use,
under a private ``rc_context`` so a caller's own matplotlib settings are left alone. Text stays
``<text>`` in the SVG (``svg.fonttype: none``): the browser draws it with its own fonts, so
Chinese labels render and the numbers are searchable in the page. Titles are the HTML's
``<figcaption>``, not part of the figures.
"""

from __future__ import annotations

import logging
import math
import re
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

# the style and SVG helpers, without pandas (the history's plots use them too)
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
    _text_in,
)

if TYPE_CHECKING:
    from afbench.store import Summary

log = logging.getLogger(__name__)

# Phases of step_trace_time.csv that add up to a step; "Overlapped" overlaps them.
STACKED_PHASES = ("Computing", "Communication(Not Overlapped)", "Free")
OVERLAPPED = "Overlapped"
PHASE_COLOURS = {
    "Computing": "#2563eb",
    "Communication(Not Overlapped)": "#f59e0b",
    "Free": "#cbd5e1",
    OVERLAPPED: "#7c3aed",
}
KERNEL_LABEL_CHARS = 34
KERNEL_WIDTH_IN = 6.2


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def variant_colours(summary: Summary) -> dict[str, str]:
    """One colour per variant, stable across the plots: the baseline slate, the others a palette
    in the order of ``summary.variants`` (then of the comparisons)."""
    base = summary.baseline
    names = list(summary.variants)
    names += [c.variant.name for c in summary.comparisons if c.variant.name not in names]
    names += [v for v in summary.kernels if v not in names]
    out, i = {}, 0
    for name in names:
        if name == base:
            out[name] = BASELINE_COLOUR
        else:
            out[name] = PALETTE[i % len(PALETTE)]
            i += 1
    if base is not None:
        out.setdefault(base, BASELINE_COLOUR)
    return out


def _measured_window(summary: Summary, steps: pd.DataFrame) -> tuple[float, float] | None:
    """(first, last) measured step of the verdict phase: the scheduler's ``measure`` window for
    training, the ``measured`` flag of the per-run rows for inference."""
    for p in summary.parameters:
        if p.phase == summary.verdict_phase:
            m = p.scheduler.get("measure")
            if (
                isinstance(m, dict)
                and is_finite(m.get("first_step"))
                and is_finite(m.get("last_step"))
            ):
                return float(m["first_step"]), float(m["last_step"])
    if "measured" in steps:
        sel = steps.loc[steps["measured"].fillna(False).astype(bool), "step"]
        if len(sel):
            return float(sel.min()), float(sel.max())
    return None


def _legend_columns(n: int) -> int:
    return 1 if n <= 14 else 2


def step_time_plot(summary: Summary, steps: pd.DataFrame | None, L: dict[str, str]) -> Plot:
    """Step time (s) against step, one line per run of the verdict phase, coloured by variant
    (later repeats fainter), the measured window shaded; log scale when the slowest step is
    >20x the fastest (a compiling first step). Inference, where one "step" is one pass over
    every prompt, gets a second panel: TPOT mean (ms) per pass."""
    if (
        steps is None
        or steps.empty
        or not {"step", "step_time_s", "run_id", "variant"} <= set(steps)
    ):
        return Plot(note=L["no_steps_plot"])
    sel = steps
    if "phase" in steps and summary.verdict_phase is not None:
        sel = steps[steps["phase"] == summary.verdict_phase]
    sel = sel[pd.to_numeric(sel["step_time_s"], errors="coerce").gt(0)]
    if sel.empty:
        return Plot(note=L["no_steps_plot"])
    infer = any(c.workload == "infer" for c in summary.comparisons) or (
        "tpot_ms_mean" in sel and "loss" not in sel
    )
    panels = [("step_time_s", L["axis_step_time"])]
    if (
        infer
        and "tpot_ms_mean" in sel
        and pd.to_numeric(sel["tpot_ms_mean"], errors="coerce").gt(0).any()
    ):
        panels.append(("tpot_ms_mean", L["axis_tpot"]))
    colours = variant_colours(summary)
    rank = {v: i for i, v in enumerate(colours)}
    runs = sorted(
        (
            (run["variant"].iloc[0], rid, run.sort_values("step"))
            for rid, run in sel.groupby("run_id", sort=False)
        ),
        key=lambda r: (rank.get(r[0], len(rank)), r[1]),
    )
    names = list(dict.fromkeys(v for v, _, _ in runs))
    window = _measured_window(summary, sel)
    labels_ = names + ([L["measured_window"]] if window is not None else [])
    ncol = _legend_columns(len(labels_))
    legend_in = ncol * (0.55 + max(_text_in(x, 8.5) for x in labels_))

    fig = _figure(WIDE_IN, 3.3)
    axes = list(fig.subplots(1, len(panels), width_ratios=[3, 2][: len(panels)], squeeze=False)[0])
    _margins(fig, left=0.75, right=legend_in + 0.2, bottom=0.5, top=0.12, wspace=0.28)
    from matplotlib import ticker  # loaded with matplotlib.figure: a dict lookup here

    for ax, (column, ylabel) in zip(axes, panels):
        seen: set[str] = set()
        for variant, _, run in runs:
            y = pd.to_numeric(run[column], errors="coerce").to_numpy(dtype=float)
            if not pd.notna(y).any():
                continue
            ax.plot(
                run["step"].to_numpy(),
                y,
                marker="o" if len(y) <= 60 else None,
                markersize=3.2,
                linewidth=1.5,
                color=colours.get(variant, "#64748b"),
                alpha=0.5 if variant in seen else 0.95,
                label=None if variant in seen else variant,
            )
            seen.add(variant)
        if window is not None:
            ax.axvspan(
                window[0] - 0.5,
                window[1] + 0.5,
                color="#0ea5e9",
                alpha=0.08,
                linewidth=0,
                label=L["measured_window"] if ax is axes[-1] else None,
            )
        vals = pd.to_numeric(sel[column], errors="coerce")
        vals = vals[vals > 0]
        if len(vals) and vals.max() / vals.min() > 20:
            ax.set_yscale("log")
            # plain numbers: the default 10^x labels go through mathtext, ~10x slower to lay out
            ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            ylabel = f"{ylabel} ({L['log_scale']})"
        ax.set_ylabel(ylabel)
        ax.set_xlabel(L["axis_run_index"] if infer else L["step"])
        ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=10, integer=True))
    axes[-1].legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        ncol=ncol,
        handlelength=1.5,
        borderaxespad=0.0,
        columnspacing=1.0,
    )
    return Plot(svg=_svg(fig))


def clipped_span(
    gains: list[float | None], lows: list[float | None], highs: list[float | None]
) -> tuple[float, list[bool], list[bool]]:
    """The half-width ``limit`` of the gain axis (percent) and, per row, whether the interval's
    low / high end lies beyond it. ``limit`` is ``max(10, 3 x the largest |gain|)``, so one
    interval of a few pairs ([-6e10%, +100%] at a first sequential look, or one round's)
    cannot squash every bar to a sliver; the clipped end is drawn at the edge with an arrow."""
    finite = [abs(g) for g in gains if g is not None and is_finite(g)]
    limit = max(10.0, 3.0 * max(finite, default=0.0))
    low_cut = [lo is not None and is_finite(lo) and lo < -limit for lo in lows]
    high_cut = [hi is not None and is_finite(hi) and hi > limit for hi in highs]
    return limit, low_cut, high_cut


def gain_plot(summary: Summary, L: dict[str, str]) -> Plot:
    """Gain vs baseline (%) per variant as horizontal bars coloured by the verdict (green
    FASTER, red SLOWER, grey NO_GAIN or INCONCLUSIVE: a bar's sign alone is not a verdict), with
    error bars from ``speed.ci_low``/``speed.ci_high`` where a comparison carries them, clipped
    at :func:`clipped_span`'s limit (an arrow marks a clipped end); a variant without a gain
    (failed, skipped) is listed with "n/a"."""
    comps = summary.comparisons
    if not any(is_finite(c.speed.gain_pct) for c in comps):
        return Plot(note=L["no_gain_plot"])
    n = len(comps)
    gains = [c.speed.gain_pct if is_finite(c.speed.gain_pct) else None for c in comps]
    lows = [c.speed.ci_low for c in comps]
    highs = [c.speed.ci_high for c in comps]
    has_ci = [
        g is not None and is_finite(lo) and is_finite(hi) for g, lo, hi in zip(gains, lows, highs)
    ]
    level = next((c.speed.level for c in comps if c.speed.level is not None), None)
    top = 0.32 if any(has_ci) else 0.1  # room for the error bars' legend above the axes
    fig = _figure(WIDE_IN, 0.65 + top + 0.3 * max(n, 2))
    ax = fig.add_subplot()
    names = [c.variant.name for c in comps]
    _margins(fig, left=0.3 + max(_text_in(x, 9) for x in names), right=0.3, bottom=0.5, top=top)
    ys = list(range(n))
    ax.barh(
        ys,
        [g or 0.0 for g in gains],
        height=0.6 if n > 1 else 0.45,
        color=[verdict_colour(c.verdict, False) for c in comps],
    )
    limit, low_cut, high_cut = clipped_span(gains, lows, highs)
    low_end = [max(min(lows[i], gains[i]), -limit) if has_ci[i] else gains[i] for i in ys]
    high_end = [min(max(highs[i], gains[i]), limit) if has_ci[i] else gains[i] for i in ys]
    if any(has_ci):
        idx = [i for i in ys if has_ci[i]]
        ax.errorbar(
            [gains[i] for i in idx],
            idx,
            xerr=[[gains[i] - low_end[i] for i in idx], [high_end[i] - gains[i] for i in idx]],
            fmt="none",
            ecolor="#0f172a",
            elinewidth=1.1,
            capsize=3.5,
            capthick=1.1,
            label=f"{level:.0%} {L['gain_ci']}" if is_finite(level) else L["gain_ci"],
        )
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), borderaxespad=0.2)
        for i in idx:  # an interval wider than the axis: an arrow at the edge it runs past
            if low_cut[i]:
                ax.plot([low_end[i]], [i], marker="<", color="#0f172a", markersize=6)
            if high_cut[i]:
                ax.plot([high_end[i]], [i], marker=">", color="#0f172a", markersize=6)
    lo = min([0.0] + [x for x in low_end if x is not None])
    hi = max([0.0] + [x for x in high_end if x is not None])
    pad = (hi - lo) * 0.2 or 1.0
    ax.set_xlim(lo - (pad if lo < 0 else 0.05 * pad), hi + (pad if hi > 0 else 0.05 * pad))
    for i, g in enumerate(gains):
        if g is None:
            ax.text(0, i, " n/a", va="center", ha="left", color="#64748b", fontsize=8.5)
        else:
            ax.annotate(
                f"{g:+.2f}%",
                (high_end[i] if g >= 0 else low_end[i], i),
                xytext=(4 if g >= 0 else -4, 0),
                textcoords="offset points",
                va="center",
                ha="left" if g >= 0 else "right",
                fontsize=8.5,
                color="#0f172a",
            )
    ax.axvline(0, color="#334155", linewidth=1.0)
    ax.set_yticks(ys, names)
    ax.set_ylim(n - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(L["axis_gain"])
    return Plot(svg=_svg(fig))


def memory_plot(summary: Summary, L: dict[str, str]) -> Plot:
    """Peak memory (GiB) of the verdict phase per variant, baseline first, as horizontal bars
    in the variants' colours, each labelled with its GiB and change vs the baseline; a bar
    whose rise is above ``report.memory_warn_pct`` is outlined red and marked ⚠. A variant
    without a figure is listed with "n/a"."""
    comps = summary.comparisons
    if not comps:
        return Plot(note=L["no_memory_plot"])
    sides = [(comps[0].baseline, None)] + [(c.variant, c.memory) for c in comps]
    peaks = [x.memory.peak_gib if is_finite(x.memory.peak_gib) else None for x, _ in sides]
    if not any(v is not None for v in peaks):
        return Plot(note=L["no_memory_plot"])
    colours = variant_colours(summary)
    names = [x.name for x, _ in sides]
    n = len(sides)
    fig = _figure(WIDE_IN, 0.75 + 0.3 * max(n, 2))
    ax = fig.add_subplot()
    _margins(fig, left=0.3 + max(_text_in(x, 9) for x in names), right=0.3, bottom=0.5, top=0.1)
    ys = list(range(n))
    warn = [m is not None and m.warn for _, m in sides]
    ax.barh(
        ys,
        [v or 0.0 for v in peaks],
        height=0.6 if n > 1 else 0.45,
        color=[colours.get(name, PALETTE[0]) for name in names],
        edgecolor=[GAIN_DOWN if w else "none" for w in warn],
        linewidth=1.6,
    )
    top = max(v for v in peaks if v is not None)
    ax.set_xlim(0, top * 1.35 or 1.0)
    for i, ((x, m), v) in enumerate(zip(sides, peaks)):
        if v is None:
            ax.text(0, i, " n/a", va="center", ha="left", color="#64748b", fontsize=8.5)
            continue
        label = f" {v:,.3f} GiB"
        if m is not None and is_finite(m.delta_pct):
            label += f" ({m.delta_pct:+.1f}%{' ⚠' if m.warn else ''})"
        ax.text(
            v,
            i,
            label,
            va="center",
            ha="left",
            fontsize=8.5,
            color=GAIN_DOWN if warn[i] else "#0f172a",
        )
    ax.set_yticks(ys, names)
    ax.set_ylim(n - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    measures = sorted({x.memory.measure for x, _ in sides if x.memory.measure})
    ax.set_xlabel(L["axis_memory"] + (f" ({', '.join(measures)})" if measures else ""))
    return Plot(svg=_svg(fig))


def phase_plot(summary: Summary, L: dict[str, str]) -> Plot:
    """Per-step phase means (ms) of the profile phase: Computing / Communication(Not Overlapped)
    / Free stacked per variant (baseline first), and Overlapped in its own panel beside, since
    it overlaps the others and adding it would count time twice."""
    entries = [p for p in summary.profiling if p.phases]
    if not entries:
        return Plot(note=L["no_phase_plot"])
    base = entries[0].baseline
    rows: list[tuple[str, dict[str, float]]] = [
        (
            base,
            {
                ph.phase: ph.baseline_us / 1e3
                for ph in entries[0].phases
                if is_finite(ph.baseline_us)
            },
        )
    ]
    for p in entries:
        label = p.variant if p.status == "COMPARABLE" else f"{p.variant} ({p.status})"
        rows.append(
            (label, {ph.phase: ph.variant_us / 1e3 for ph in p.phases if is_finite(ph.variant_us)})
        )
    n = len(rows)
    fig = _figure(WIDE_IN, 1.05 + 0.32 * n)
    ax, ax_ov = fig.subplots(1, 2, sharey=True, width_ratios=[4, 1.2])
    _margins(
        fig,
        left=0.3 + max(_text_in(name, 9) for name, _ in rows),
        right=0.25,
        bottom=0.5,
        top=0.4,
        wspace=0.08,
    )
    ys = list(range(n))
    left = [0.0] * n
    for phase in STACKED_PHASES:
        vals = [r.get(phase, 0.0) for _, r in rows]
        ax.barh(
            ys,
            vals,
            left=left,
            height=0.6,
            color=PHASE_COLOURS[phase],
            label=phase,
            edgecolor="white",
            linewidth=0.6,
        )
        left = [a + b for a, b in zip(left, vals)]
    for i, total in enumerate(left):
        ax.text(total, i, f" {total:,.1f}", va="center", ha="left", fontsize=8, color="#0f172a")
    ax.set_xlim(0, max(left) * 1.16 or 1.0)
    ov = [r.get(OVERLAPPED, 0.0) for _, r in rows]
    ax_ov.barh(
        ys,
        ov,
        height=0.6,
        color=PHASE_COLOURS[OVERLAPPED],
        hatch="///",
        edgecolor="white",
        linewidth=0.0,
        alpha=0.85,
        label=OVERLAPPED,
    )
    for i, v in enumerate(ov):
        ax_ov.text(v, i, f" {v:,.1f}", va="center", ha="left", fontsize=8, color="#0f172a")
    ax_ov.set_xlim(0, max(ov) * 1.6 if max(ov) > 0 else 1.0)
    ax.set_yticks(ys, [name for name, _ in rows])
    ax.set_ylim(n - 0.5, -0.5)
    for a in (ax, ax_ov):
        a.grid(axis="y", visible=False)
        a.xaxis.get_major_locator().set_params(nbins=5 if a is ax_ov else 8)
    ax.set_xlabel(L["axis_phase_ms"])
    ax_ov.set_xlabel(L["axis_overlapped"])
    ax_ov.tick_params(axis="y", left=False)
    handles = [*ax.get_legend_handles_labels()[0], *ax_ov.get_legend_handles_labels()[0]]
    fig.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(ax.get_position().x0, 1.0),
        ncol=4,
        borderaxespad=0.2,
        handlelength=1.4,
        columnspacing=1.4,
    )
    return Plot(svg=_svg(fig))


def short_label(name: str, n: int = KERNEL_LABEL_CHARS) -> str:
    """``name`` in at most ``n`` characters, cut in the middle: op names that share a long
    prefix (``..._attention_for_cpu`` / ``..._attention_for_cpu_backward``) stay distinct."""
    name = re.sub(r"\s+", " ", str(name)).strip()
    if len(name) <= n:
        return name
    head = (n - 1) * 2 // 5
    return name[:head] + "…" + name[len(name) - (n - 1 - head) :]


def kernel_plots(summary: Summary, L: dict[str, str]) -> dict[str, Plot]:
    """Top ops per variant by self time (ms), horizontal bars labelled with ms and % of the
    profiled time, one shared x scale so variants compare at a glance (the full names are in
    the table beside). Laid out by hand, without tick machinery: a sweep draws one per variant,
    so each must be cheap."""
    tables = {v: rows for v, rows in summary.kernels.items() if rows}
    if not tables:
        return {}
    colours = variant_colours(summary)
    all_rows = [r for rows in tables.values() for r in rows]
    xmax = max((r.total_us for r in all_rows if is_finite(r.total_us)), default=0.0) / 1e3 or 1.0
    size = 8.0
    label_in = 0.1 + max(len(short_label(r.op_type)) for r in all_rows) * 0.61 * size / 72
    value_in = 0.1 + _text_in(f" {xmax:,.1f} ms · 100.0%", size)
    width = KERNEL_WIDTH_IN
    out = {}
    for variant, rows in tables.items():
        n = len(rows)
        height = 0.16 + 0.22 * n
        fig = _figure(width, height)
        ax = fig.add_axes(
            (label_in / width, 0.08 / height, 1 - (label_in + value_in) / width, 1 - 0.16 / height)
        )
        vals = [r.total_us / 1e3 if is_finite(r.total_us) else 0.0 for r in rows]
        ax.barh(range(n), vals, height=0.68, color=colours.get(variant, PALETTE[0]))
        ax.set_xlim(0, xmax)
        ax.set_ylim(n - 0.5, -0.5)
        label_tf = ax.get_yaxis_transform()
        for i, (r, v) in enumerate(zip(rows, vals)):
            ax.text(
                -0.015,
                i,
                short_label(r.op_type),
                transform=label_tf,
                ha="right",
                va="center",
                fontsize=size,
                color="#1e293b",
                family="monospace",
            )
            pct = f" · {r.ratio_pct:.1f}%" if is_finite(r.ratio_pct) else ""
            ax.text(
                v, i, f" {v:,.1f} ms{pct}", ha="left", va="center", fontsize=size, color="#334155"
            )
        ax.set_axis_off()
        out[variant] = Plot(svg=_svg(fig))
    return out


def report_plots(summary: Summary, steps: pd.DataFrame | None, L: dict[str, str]) -> dict[str, Any]:
    """All plots of the HTML report: ``step_time``, ``gains``, ``memory``, ``phases`` (each a
    :class:`Plot`), ``kernels`` (variant -> :class:`Plot`) and ``kernels_note`` (why a variant
    with a kernel table has no plot). A plot that raises is logged with its traceback and
    replaced by a note naming the error, so one bad figure does not cost the whole report."""
    try:
        matplotlib, _, style = _matplotlib()
    except ImportError as exc:
        log.warning("HTML report without plots: %s", exc)
        off = Plot(note=L["plots_unavailable"])
        return {
            "step_time": off,
            "gains": off,
            "memory": off,
            "phases": off,
            "kernels": {},
            "kernels_note": off.note,
        }
    failures: list[str] = []

    def guarded(make: Callable[[], Any], on_error: Any) -> Any:
        try:
            with matplotlib.rc_context(style):
                return make()
        except Exception as exc:  # noqa: BLE001 - reported in the page and the log
            log.warning("report plot failed", exc_info=True)
            failures.append(f"{L['plot_failed']}: {type(exc).__name__}: {exc}")
            return on_error if on_error is not None else Plot(note=failures[-1])

    failed = object()
    kernels = guarded(lambda: kernel_plots(summary, L), failed)
    kernels_note = L["no_kernel_plot"]
    if kernels is failed:
        kernels, kernels_note = {}, failures[-1]
    return {
        "step_time": guarded(lambda: step_time_plot(summary, steps, L), None),
        "gains": guarded(lambda: gain_plot(summary, L), None),
        "memory": guarded(lambda: memory_plot(summary, L), None),
        "phases": guarded(lambda: phase_plot(summary, L), None),
        "kernels": kernels,
        "kernels_note": kernels_note,
    }


# --- the sweep report ---------------------------------------------------------------------


UNTRUSTED_COLOUR = "#d97706"


def verdict_colour(verdict: str, untrusted: bool) -> str:
    if untrusted:
        return UNTRUSTED_COLOUR
    if verdict.endswith("FASTER"):
        return GAIN_UP
    if verdict.endswith("SLOWER"):
        return GAIN_DOWN
    return "#64748b"
