"""``python -m afbench.history calibration list | show KIND | forget KIND``: see and manage
this host's calibration (:mod:`afbench.history.calibration`): per kind of run, its pooled
spread, how many rounds and experiments it rests on and when it was learnt; per estimate, the
experiment and output directory it came from; ``forget`` deletes one kind (the next one-round
experiment of it asks for a calibration again). Exit status: 0 done, 2 an unknown kind."""

from __future__ import annotations

import difflib
import sys
from typing import Any

from sqlalchemy import Engine

from afbench.history.calibration import KEEP, _host, _pooled
from afbench.history.db import calibration_rows, forget_calibration


def _summary_line(kind: str, host: str, row: dict[str, Any]) -> str:
    """One kind as a line: pooled spread, rounds, experiments, estimates, when."""
    entries = list((row.get("data") or {}).get("estimates", []))
    pooled = _pooled(kind, host, entries)
    if pooled is None:
        return f"{kind}  unreadable ({len(entries)} estimate(s)): forget it and calibrate again"
    fit = (
        ""
        if pooled["n_pairs"] >= 12 and not pooled["n_outlier_pairs"]
        else "  (cannot decide one round: fewer than 12 rounds or an outlier run)"
    )
    return (
        f"{kind}  spread {pooled['spread_pct']:.2f}% on {pooled['n_pairs']} rounds "
        f"from {len({e.get('source') for e in entries[-KEEP:]})} experiment(s), "
        f"updated {pooled['updated_at']}{fit}"
    )


def _rows(engine: Engine) -> tuple[str, dict[str, dict[str, Any]]]:
    host = _host()
    return host, {r["run_kind"]: r for r in calibration_rows(engine, host)}


def _unknown(kind: str, known: dict[str, Any], host: str) -> int:
    near = difflib.get_close_matches(kind, list(known), n=1, cutoff=0.5)
    print(
        f"history calibration: no calibration of kind {kind!r} on this host ({host})"
        + (f"; did you mean {near[0]!r}?" if near else "")
        + " (python -m afbench.history calibration list names them)",
        file=sys.stderr,
    )
    return 2


def cmd_calibration(engine: Engine, action: str, kind: str | None) -> int:
    """Print (``list``, ``show``) or delete (``forget``) this host's calibrations."""
    host, known = _rows(engine)
    if action == "list":
        if not known:
            print(
                f"history calibration: none on this host ({host}); calibrate with "
                "python -m afbench experiment=calibrate_host (or a multi-round experiment)"
            )
        for k, row in known.items():
            print(_summary_line(k, host, row))
        return 0
    if not kind:
        print(
            f"history calibration {action}: name the KIND (python -m afbench.history "
            "calibration list names them)",
            file=sys.stderr,
        )
        return 2
    if kind not in known:
        return _unknown(str(kind), known, host)
    entries = list((known[kind].get("data") or {}).get("estimates", []))
    if action == "forget":
        forget_calibration(engine, host, kind)
        print(f"history calibration: forgot {kind} on host {host} ({len(entries)} estimate(s))")
        return 0
    print(_summary_line(kind, host, known[kind]))
    for e in entries:
        outliers = e.get("n_outlier_pairs")
        print(
            f"  {e.get('recorded_at', '?')}  {e.get('how', '?')}  "
            f"spread {float(e.get('spread_pct', 0)):.2f}% on {e.get('n_pairs', '?')} rounds"
            + (f" ({outliers} with an outlier run)" if outliers else "")
            + f"  {e.get('experiment') or '?'}  {e.get('source', '?')}"
        )
    return 0
