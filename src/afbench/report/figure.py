"""The report's figure style and SVG output, without pandas: shared by the experiment and
sweep plots (:mod:`afbench.report.plots`) and the history's trend plots
(:mod:`afbench.history.page`).

matplotlib is used without pyplot (``Figure`` + the SVG printer), imported once on first use,
under a private ``rc_context`` so a caller's own matplotlib settings are left alone. Text stays
``<text>`` in the SVG (``svg.fonttype: none``).
"""

from __future__ import annotations

import functools
import io
import sys
import warnings
from dataclasses import dataclass
from typing import Any

BASELINE_COLOUR = "#475569"
PALETTE = (
    "#2563eb",
    "#ea580c",
    "#16a34a",
    "#9333ea",
    "#db2777",
    "#0891b2",
    "#ca8a04",
    "#dc2626",
    "#4f46e5",
    "#65a30d",
    "#c026d3",
    "#0d9488",
    "#b45309",
    "#7c3aed",
    "#be123c",
    "#0369a1",
)
GAIN_UP, GAIN_DOWN = "#16a34a", "#dc2626"
WIDE_IN = 9.6  # full-width figure, inches (about the page's text column)

STYLE = {
    "svg.fonttype": "none",
    "svg.hashsalt": "afbench",  # stable ids: re-rendering the same data gives the same file
    # names from data (an op name '$\frac{a}{$', a sweep value) are drawn as text: never
    # mathtext, whose parser breaks on them (and would draw '$x$' as an italic x)
    "text.parse_math": False,
    "font.size": 9.0,
    "axes.edgecolor": "#94a3b8",
    "axes.labelcolor": "#334155",
    "axes.titlesize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e2e8f0",
    "grid.linewidth": 0.8,
    "xtick.color": "#475569",
    "ytick.color": "#475569",
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
}
# Fonts that hold CJK glyphs, used for layout after DejaVu Sans when installed.
CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "Microsoft YaHei",
    "SimHei",
)


@dataclass(frozen=True)
class Plot:
    """One figure of the report: ``svg`` (inline markup) or, when omitted, ``note`` (why)."""

    svg: str | None = None
    note: str = ""


@functools.lru_cache(maxsize=1)
def _matplotlib() -> tuple[Any, Any, dict[str, Any]]:
    """(matplotlib, Figure, rc settings of the report), imported once; the Agg backend unless
    an interactive session (pyplot already imported) chose its own."""
    # matplotlib takes about 1 s to import: only an HTML report with plots pays for it
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    # after choosing the Agg backend, which must precede these imports
    from matplotlib import font_manager
    from matplotlib.figure import Figure

    installed = {f.name for f in font_manager.fontManager.ttflist}
    fonts = ["DejaVu Sans", *[f for f in CJK_FONTS if f in installed]]
    return matplotlib, Figure, {**STYLE, "font.family": "sans-serif", "font.sans-serif": fonts}


def _svg(fig: Any) -> str:
    """The figure as ``<svg>`` markup without XML prolog (for inlining), scaled by CSS."""
    buf = io.StringIO()
    with warnings.catch_warnings():
        # Layout metrics of CJK text without a CJK font installed: the browser draws it anyway.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font")
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _figure(width_in: float, height_in: float, **kwargs: Any) -> Any:
    _, Figure, _ = _matplotlib()
    return Figure(figsize=(width_in, height_in), **kwargs)


def _text_in(text: str, size_pt: float) -> float:
    """Approximate width (inches) of ``text`` at ``size_pt``: about 0.6 em a Latin glyph, 1 em a
    CJK one. Margins are laid out from this instead of ``bbox_inches="tight"``, which draws
    every figure twice."""
    return sum(1.0 if ord(ch) >= 0x2E80 else 0.6 for ch in str(text)) * size_pt / 72


def _margins(
    fig: Any, left: float, right: float, bottom: float, top: float, wspace: float | None = None
) -> None:
    """Fixed margins in inches around the subplot grid."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, wspace=wspace
    )
