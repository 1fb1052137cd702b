"""The sweep report's figures (inline SVG, matplotlib's Agg backend, like the experiment's in
:mod:`afbench.report.plots`): the forest plot of gains with their intervals, the main effects,
the grid of gains for two swept keys, and step time per combination. Each returns a
:class:`Plot` (an SVG, or a note saying why there is none)."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import pandas as pd

from afbench.report.figure import (
    PALETTE,
    WIDE_IN,
    Plot,
    _figure,
    _margins,
    _matplotlib,
    _svg,
    _text_in,
)
from afbench.report.plots import (
    UNTRUSTED_COLOUR,
    clipped_span,
    is_finite,
    short_label,
    verdict_colour,
)

log = logging.getLogger(__name__)

SWEEP_PANELS_MAX = 16  # step-time small multiples drawn; the rest are named in a note


def combination_label(row: Any, keys: list[str]) -> str:
    """Short name of a sweep combination for a plot: each swept key's last dotted part and
    its value (``autofuse=True, add_rmsnorm=False``), then ``[variant]`` where a job has
    several; the full name is in the table."""
    parts = [f"{k.rsplit('.', 1)[-1]}={row.setting.get(k, '')}" for k in keys]
    label = ", ".join(parts) or row.name
    return label + (f" [{row.variant}]" if row.name.endswith(f" [{row.variant}]") else "")


def _interval_panel(
    labels_: list[str],
    points: list[float | None],
    lows: list[float | None],
    highs: list[float | None],
    colours: list[str],
    notes: list[str],
    xlabel: str,
    hollow: list[bool],
    urls: list[str | None] | None = None,
) -> str:
    """Rows of point estimates with horizontal intervals (a forest plot), top to bottom, a
    line at 0, each row annotated with ``notes[i]``; a row without a point shows its note
    alone. Returns the SVG."""
    n = len(labels_)
    fig = _figure(WIDE_IN, 0.75 + 0.3 * max(n, 2))
    ax = fig.add_subplot()
    note_in = 0.2 + max((_text_in(t, 8.5) for t in notes), default=0.0)
    _margins(
        fig,
        left=0.3 + max(_text_in(x, 9) for x in labels_),
        right=0.2 + note_in,
        bottom=0.5,
        top=0.12,
    )
    # an interval of a few pairs can reach -1e23%: clip at clipped_span's limit, arrow at the edge
    limit, low_cut, high_cut = clipped_span(points, lows, highs)
    lows = [max(a, -limit) if is_finite(a) else a for a in lows]
    highs = [min(b, limit) if is_finite(b) else b for b in highs]
    ends = [x for x in [*points, *lows, *highs] if is_finite(x)]
    lo, hi = min([0.0, *ends]), max([0.0, *ends])
    pad = (hi - lo) * 0.08 or 1.0
    ax.set_xlim(lo - pad, hi + pad)
    for i, (p, a, b) in enumerate(zip(points, lows, highs)):
        if is_finite(a) and is_finite(b):
            ax.plot([a, b], [i, i], color=colours[i], linewidth=2.0, solid_capstyle="butt")
            ax.plot(
                [a, a, None, b, b],
                [i - 0.18, i + 0.18, None, i - 0.18, i + 0.18],
                color=colours[i],
                linewidth=1.2,
            )
            for cut, x, marker in ((low_cut[i], a, "<"), (high_cut[i], b, ">")):
                if cut:
                    ax.plot([x], [i], marker=marker, markersize=7, color=colours[i])
        if is_finite(p):
            ax.plot(
                [p],
                [i],
                marker="o",
                markersize=6.5,
                color=colours[i],
                markerfacecolor="white" if hollow[i] else colours[i],
                markeredgewidth=1.6,
            )
        text = ax.text(
            1.01,
            i,
            notes[i],
            transform=ax.get_yaxis_transform(),
            va="center",
            ha="left",
            fontsize=8.5,
            color=colours[i] if is_finite(p) else "#64748b",
        )
        if urls and urls[i]:
            text.set_url(urls[i])
    ax.axvline(0, color="#334155", linewidth=1.0)
    ax.set_yticks(range(n), labels_)
    ax.set_ylim(n - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(xlabel)
    return _svg(fig)


def sweep_forest_plot(summary: Any, L: dict[str, str]) -> Plot:
    """Gain vs the baseline combination (%) of every other combination with its interval (at
    the sweep's per-comparison level), sorted best first; untrusted combinations hollow and
    amber; combinations without a gain listed last with their verdict. ``summary``: an
    :class:`afbench.store.SweepSummary`."""
    rows = [r for r in summary.combinations if r.name != summary.baseline]
    if not any(is_finite(r.gain_pct) for r in rows):
        return Plot(note=L["no_sweep_gain_plot"])
    rows.sort(key=lambda r: (not is_finite(r.gain_pct), -(r.gain_pct or 0.0)))
    notes = []
    for r in rows:
        mark = f" · {L['untrusted']}" if r.untrusted else ""
        notes.append(
            (f"{r.gain_pct:+.2f}% {r.verdict}" if is_finite(r.gain_pct) else r.verdict) + mark
        )
    return Plot(
        svg=_interval_panel(
            [combination_label(r, summary.swept_keys) for r in rows],
            [r.gain_pct for r in rows],
            [r.ci_low for r in rows],
            [r.ci_high for r in rows],
            [verdict_colour(r.verdict, r.untrusted) for r in rows],
            notes,
            L["axis_gain"],
            [r.untrusted for r in rows],
            [r.report for r in rows],
        )
    )


def sweep_effects_plot(summary: Any, L: dict[str, str]) -> Plot:
    """Main effect (%) of each swept key's value against its reference value, with its
    sign-test interval; ``summary``: an :class:`afbench.store.SweepSummary`."""
    effects = [e for e in summary.main_effects if is_finite(e.effect_pct)]
    if not effects:
        return Plot(note=L["no_effects_plot"])
    notes = [f"{e.effect_pct:+.2f}% ({e.cells} {L['cells']})" for e in effects]
    return Plot(
        svg=_interval_panel(
            [f"{e.key.rsplit('.', 1)[-1]}: {e.reference} → {e.value}" for e in effects],
            [e.effect_pct for e in effects],
            [e.ci_low for e in effects],
            [e.ci_high for e in effects],
            ["#2563eb"] * len(effects),
            notes,
            L["axis_effect"],
            [False] * len(effects),
        )
    )


def sweep_grid_plot(summary: Any, L: dict[str, str]) -> Plot:
    """For exactly two swept keys (one variant per job): a heatmap of the gain (%) of each
    combination, rows the first key's values, columns the second's, each cell annotated with
    its gain and verdict and linked to the job's report; failed cells grey, untrusted ones
    outlined in amber. ``summary``: an :class:`afbench.store.SweepSummary`."""
    keys = summary.swept_keys
    if len(keys) != 2 or len({r.variant for r in summary.combinations if r.variant}) > 1:
        return Plot(note=L["no_grid_plot"])
    rows_v = list(dict.fromkeys(r.setting.get(keys[0], "") for r in summary.combinations))
    cols_v = list(dict.fromkeys(r.setting.get(keys[1], "") for r in summary.combinations))
    rows_v.sort(key=str)
    cols_v.sort(key=str)
    cell = {
        (r.setting.get(keys[0], ""), r.setting.get(keys[1], "")): r for r in summary.combinations
    }
    gains = [
        [
            cell[(a, b)].gain_pct
            if (a, b) in cell and is_finite(cell[(a, b)].gain_pct)
            else float("nan")
            for b in cols_v
        ]
        for a in rows_v
    ]
    finite = [abs(g) for row in gains for g in row if math.isfinite(g)]
    span = max(finite, default=1.0) or 1.0
    width = min(WIDE_IN, 2.2 + 2.3 * len(cols_v))
    fig = _figure(width, 0.9 + 0.85 * len(rows_v))
    ax = fig.add_subplot()
    _margins(
        fig, left=0.35 + max(_text_in(v, 9) for v in rows_v) + 0.3, right=1.2, bottom=0.55, top=0.15
    )
    cmap = _matplotlib()[0].colormaps["RdYlGn"].with_extremes(bad="#e2e8f0")  # failed: grey
    image = ax.imshow(gains, cmap=cmap, vmin=-span, vmax=span, aspect="auto")
    for i, a in enumerate(rows_v):
        for j, b in enumerate(cols_v):
            r = cell.get((a, b))
            if r is None:
                continue
            text = (
                f"{r.gain_pct:+.2f}%\n{r.verdict}"
                if is_finite(r.gain_pct) and r.verdict != "BASELINE"
                else r.verdict
            )
            if r.untrusted:
                text += f"\n{L['untrusted']}"
                ax.add_patch(_rectangle((j - 0.47, i - 0.47), 0.94, 0.94, UNTRUSTED_COLOUR))
            label = ax.text(j, i, text, ha="center", va="center", fontsize=8.5, color="#0f172a")
            if r.report:
                label.set_url(r.report)
    ax.set_xticks(range(len(cols_v)), cols_v)
    ax.set_yticks(range(len(rows_v)), rows_v)
    ax.set_xlabel(keys[1])
    ax.set_ylabel(keys[0])
    ax.grid(False)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
    bar.set_label(L["axis_gain_short"])
    return Plot(svg=_svg(fig))


def _rectangle(xy: tuple[float, float], w: float, h: float, colour: str) -> Any:
    from matplotlib.patches import Rectangle  # loaded with matplotlib.figure: a dict lookup

    return Rectangle(xy, w, h, fill=False, edgecolor=colour, linewidth=2.4)


def sweep_step_plot(summary: Any, steps: pd.DataFrame | None, L: dict[str, str]) -> Plot:
    """Small multiples, one panel per combination (ranked order, at most
    :data:`SWEEP_PANELS_MAX`): step time (s) against step for each of its verdict-phase runs,
    the measured window shaded, outlier runs in amber; one shared y scale (log when the
    slowest step is > 20x the fastest) so a slow combination stands out. ``steps``: rows of
    run_id, step, step_time_s, combination."""
    if (
        steps is None
        or steps.empty
        or not {"run_id", "step", "step_time_s", "combination"} <= set(steps)
    ):
        return Plot(note=L["no_steps_plot"])
    sel = steps[pd.to_numeric(steps["step_time_s"], errors="coerce").gt(0)]
    rows = [r for r in summary.combinations if (sel["combination"] == r.name).any()]
    if not rows:
        return Plot(note=L["no_steps_plot"])
    shown = rows[:SWEEP_PANELS_MAX]
    ncol = min(4, len(shown))
    nrow = math.ceil(len(shown) / ncol)
    fig = _figure(WIDE_IN, 0.7 + 1.75 * nrow)
    axes = fig.subplots(nrow, ncol, sharex=True, sharey=True, squeeze=False).ravel()
    _margins(fig, left=0.75, right=0.15, bottom=0.5, top=0.3, wspace=0.08)
    fig.subplots_adjust(hspace=0.45)
    vals = pd.to_numeric(sel["step_time_s"], errors="coerce")
    log_scale = len(vals) and vals.max() / vals.min() > 20
    for ax, r in zip(axes, shown):
        runs = sel[sel["combination"] == r.name]
        for k, (rid, run) in enumerate(runs.groupby("run_id", sort=True)):
            run = run.sort_values("step")
            outlier = rid in r.outlier_runs
            ax.plot(
                run["step"].to_numpy(),
                pd.to_numeric(run["step_time_s"]).to_numpy(),
                marker="o" if len(run) <= 40 else None,
                markersize=2.4,
                linewidth=1.2,
                color=UNTRUSTED_COLOUR if outlier else PALETTE[k % len(PALETTE)],
                linestyle="--" if outlier else "-",
            )
        if r.window:
            ax.axvspan(
                r.window[0] - 0.5, r.window[1] + 0.5, color="#0ea5e9", alpha=0.08, linewidth=0
            )
        title = combination_label(r, summary.swept_keys)
        ax.set_title(
            title if len(title) <= 34 else short_label(title, 34),
            fontsize=8,
            color=UNTRUSTED_COLOUR if r.untrusted else "#334155",
        )
        if log_scale:
            ax.set_yscale("log")
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    for ax in axes[::ncol]:
        ax.set_ylabel(
            L["axis_step_time"] + (f" ({L['log_scale']})" if log_scale else ""), fontsize=8
        )
    for ax in axes[(nrow - 1) * ncol :]:
        ax.set_xlabel(L["step"])
    note = (
        "" if len(rows) <= SWEEP_PANELS_MAX else L["more_panels"].format(n=len(rows) - len(shown))
    )
    return Plot(svg=_svg(fig), note=note)


def sweep_plots(summary: Any, steps: pd.DataFrame | None, L: dict[str, str]) -> dict[str, Plot]:
    """The sweep report's figures: ``forest`` (:func:`sweep_forest_plot`), ``grid``
    (:func:`sweep_grid_plot`, two swept keys), ``effects`` (:func:`sweep_effects_plot`) and
    ``steps`` (:func:`sweep_step_plot`). A figure that raises becomes a note naming the
    error (logged with its traceback), as in :func:`report_plots`."""
    makers: dict[str, Callable[[], Plot]] = {
        "forest": lambda: sweep_forest_plot(summary, L),
        "grid": lambda: sweep_grid_plot(summary, L),
        "effects": lambda: sweep_effects_plot(summary, L),
        "steps": lambda: sweep_step_plot(summary, steps, L),
    }
    try:
        matplotlib, _, style = _matplotlib()
    except ImportError as exc:
        log.warning("sweep report without plots: %s", exc)
        return {name: Plot(note=L["plots_unavailable"]) for name in makers}
    out = {}
    for name, make in makers.items():
        try:
            with matplotlib.rc_context(style):
                out[name] = make()
        except Exception as exc:  # noqa: BLE001 - one bad figure must not cost the report
            log.warning("sweep plot %s failed", name, exc_info=True)
            out[name] = Plot(note=f"{L['plot_failed']}: {type(exc).__name__}: {exc}")
    return out
