"""The host calibration's store: this host's run-to-run spread per kind of run, kept in the
history database (the ``calibration`` table of :mod:`afbench.history.schema`).

The statistics are :mod:`afbench.verdict.calibration`'s; this module keeps them. A row per
(host id, run kind) holds the estimates recorded for that kind (``data.estimates``, the newest
:data:`KEEP`): an A/A calibration (``python -m afbench experiment=calibrate_host``) and the
residual spread of every multi-round experiment. The calibration of a kind is their pooled
variance (:func:`afbench.verdict.calibration.pool`), so a host that changes ages its old
estimates out. ``spread_pct`` and ``n`` of the row repeat the pooled figure for SQL readers.

The **run kind** is what a run-to-run spread depends on: the resolved backend (a GPU's spread
is not a CPU's), the engine (a user command is not afbench's loop), the workload and model,
the sequence length and global batch size (or, for inference, the tokens generated, the batch
size and the prompts), and the number of measured steps (the run statistic is the median of
the window: a longer window moves less). Switches are not in the key. The **host** is the
history's host id (:func:`afbench.history.provenance.host_id`: host name, CPU model,
accelerator and driver). An experiment writes the calibration it used into its
``experiment.json`` (``calibration``), so an offline re-render decides as the run did.

A database that cannot be opened or written is a warning and no calibration, never a failed
experiment.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from afbench.runspec import RunSpec
from afbench.verdict.calibration import RunSpread, pool

log = logging.getLogger(__name__)

#: Estimates kept per kind (the newest): the pooled spread follows the host as it changes.
KEEP = 20
AA = "aa"
RESIDUALS = "residuals"


def run_kind(spec: RunSpec) -> str:
    """The kind of run a spread belongs to (module docstring), e.g.
    ``cpu|builtin|sft|qwen3_tiny|seq256|gbs4|window5``."""
    c = spec.config
    s = c.scheduler
    backend = spec.backend or c.backend.name
    if s.workload == "sft":
        window = s.measure.last_step - s.measure.first_step + 1
        shape = f"seq{s.seq_len}|gbs{s.global_batch_size}|window{window}"
    else:
        shape = (f"tok{s.max_new_tokens}|bs{s.batch_size}|prompts{s.num_prompts}"
                 f"|window{s.measured_runs}")
    return f"{backend}|{c.engine.name}|{s.workload}|{c.model.name}|{shape}"


def _host() -> str:
    from afbench.history.provenance import host_fingerprint

    return host_fingerprint()["host_id"]


def _estimates(url: str | None, kind: str) -> tuple[Any, str, list[dict[str, Any]]] | None:
    """(engine, host id, the stored estimates of ``kind``), or None with a warning when the
    database cannot be opened."""
    from afbench.history.db import HistoryError, open_db, read_calibration

    try:
        engine = open_db(url)
        host = _host()
        row = read_calibration(engine, host, kind)
    except HistoryError as exc:
        log.warning("afbench: host calibration unavailable: %s", exc)
        return None
    return engine, host, list(((row or {}).get("data") or {}).get("estimates", []))


def lookup(kind: str, url: str | None = None) -> dict[str, Any] | None:
    """This host's calibration of ``kind``: ``{"kind", "host_id", "spread_pct", "df",
    "n_pairs", "n_outlier_pairs", "n_experiments", "updated_at"}``, or ``None``."""
    found = _estimates(url, kind)
    if found is None:
        return None
    _, host, entries = found
    spread = pool(RunSpread.of(e) for e in entries[-KEEP:])
    if spread is None:
        return None
    return {"kind": kind, "host_id": host, "spread_pct": spread.spread_pct, "df": spread.df,
            "n_pairs": spread.n_pairs, "n_outlier_pairs": spread.n_outlier_pairs,
            "n_experiments": spread.n_experiments,
            "updated_at": max(e["recorded_at"] for e in entries[-KEEP:])}


def record(kind: str, spread: RunSpread, source: str, how: str,
           url: str | None = None) -> RunSpread | None:
    """Add one estimate of ``kind``'s spread on this host (``how``: ``aa`` or ``residuals``;
    ``source``: the output directory; recorded once per source). Returns the pooled
    calibration of ``kind`` now, or None (and warns) when the database cannot be written."""
    from sqlalchemy.exc import SQLAlchemyError

    from afbench.history.db import record_calibration

    found = _estimates(url, kind)
    if found is None:
        return None
    engine, host, entries = found
    if any(e.get("source") == source for e in entries):  # a re-render records nothing twice
        return pool(RunSpread.of(e) for e in entries[-KEEP:])
    entries.append({"spread_pct": spread.spread_pct, "df": spread.df, "n_pairs": spread.n_pairs,
                    "n_experiments": spread.n_experiments,
                    "n_outlier_pairs": spread.n_outlier_pairs, "how": how, "source": source,
                    "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    entries = entries[-KEEP:]
    pooled = pool(RunSpread.of(e) for e in entries)
    try:
        record_calibration(engine, host, kind, pooled.spread_pct, pooled.n_pairs,
                           {"estimates": entries, "df": pooled.df})
    except SQLAlchemyError as exc:
        log.warning("afbench: host calibration not recorded: %s", str(exc).splitlines()[0])
        return None
    return pooled
