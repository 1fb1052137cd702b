"""The host calibration's store: this host's run-to-run spread per kind of run.

The statistics are :mod:`afbench.verdict.calibration`'s; this module keeps them. One JSON file
per user (``platformdirs.user_data_dir("afbench")/calibration.json``, or the path in
``AFBENCH_CALIBRATION_FILE``) maps a host fingerprint, then a run kind, to the estimates that
were recorded for it: an A/A calibration (``python -m afbench experiment=calibrate_host``) and
the residuals of every multi-round experiment. The calibration of a kind is their pooled
variance over the newest :data:`KEEP` estimates, so a host that changes ages its old estimates
out.

The **run kind** is what a run-to-run spread depends on: the resolved backend (a GPU's spread
is not a CPU's), the engine (a user command is not afbench's loop), the workload and model,
the sequence length and global batch size (or, for inference, the tokens generated, the batch
size and the prompts), and the number of measured steps (the run statistic is the median of
the window: a longer window moves less). The host fingerprint is the host name, the CPU model
and the number of CPUs. An experiment writes the calibration it used into its
``experiment.json`` (``calibration``), so an offline re-render decides as the run did.

A file that cannot be read or written is a warning and no calibration, never a failed
experiment.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from afbench.io import write_json_atomic
from afbench.runspec import RunSpec
from afbench.verdict.calibration import RunSpread, pool

log = logging.getLogger(__name__)

ENV_FILE = "AFBENCH_CALIBRATION_FILE"
#: Estimates kept per kind (the newest): the pooled spread follows the host as it changes.
KEEP = 20
AA = "aa"
RESIDUALS = "residuals"


def store_path() -> Path:
    """The calibration file: ``$AFBENCH_CALIBRATION_FILE`` or the per-user data directory."""
    if os.environ.get(ENV_FILE):
        return Path(os.environ[ENV_FILE])
    import platformdirs

    return Path(platformdirs.user_data_dir("afbench")) / "calibration.json"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_fingerprint() -> str:
    """``<hostname> | <CPU model> | <n> CPUs``."""
    return f"{socket.gethostname()} | {_cpu_model()} | {os.cpu_count()} CPUs"


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


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("afbench: host calibration %s unreadable (%s): no calibration used", path, exc)
        return {}


def lookup(kind: str, path: Path | None = None) -> dict[str, Any] | None:
    """The calibration of ``kind`` on this host: ``{"kind", "host", "spread_pct", "df",
    "n_pairs", "n_outlier_pairs", "n_experiments", "updated_at", "file"}``, or ``None``."""
    path = path or store_path()
    entries = _load(path).get(host_fingerprint(), {}).get(kind, [])
    spread = pool(RunSpread.of(e) for e in entries[-KEEP:])
    if spread is None:
        return None
    return {"kind": kind, "host": host_fingerprint(), "spread_pct": spread.spread_pct,
            "df": spread.df, "n_pairs": spread.n_pairs, "n_outlier_pairs": spread.n_outlier_pairs,
            "n_experiments": spread.n_experiments,
            "updated_at": max(e["recorded_at"] for e in entries[-KEEP:]), "file": str(path)}


def record(kind: str, spread: RunSpread, source: str, how: str,
           path: Path | None = None) -> bool:
    """Add one estimate of ``kind``'s spread on this host (``how``: ``aa`` or ``residuals``;
    ``source``: the output directory). Returns False (and warns) when the file cannot be
    written."""
    path = path or store_path()
    data = _load(path)
    entries = data.setdefault(host_fingerprint(), {}).setdefault(kind, [])
    if any(e.get("source") == source for e in entries):
        return True  # a re-render records nothing twice
    entries.append({"spread_pct": spread.spread_pct, "df": spread.df, "n_pairs": spread.n_pairs,
                    "n_experiments": spread.n_experiments,
                    "n_outlier_pairs": spread.n_outlier_pairs, "how": how, "source": source,
                    "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    del entries[:-KEEP]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
    except OSError as exc:
        log.warning("afbench: host calibration not recorded in %s (%s)", path, exc)
        return False
    return True
