"""Report: tables + summary.json + Jinja2-rendered report.md / report.html."""

from afbench.report.render import build_report, console_lines, render

__all__ = ["build_report", "console_lines", "render"]
