"""Readers of torchtitan's outputs: console step lines, structured logs, profiler traces,
and the afbench step records made from them. Pure functions over text and files (formats in
:mod:`afbench.engines.torchtitan`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import check_unique_steps, is_placeholder_loss, log_lines
from afbench.config.engines import TITAN_STEP_PATTERN

_RANK_PREFIX = re.compile(r"^\[(?:[A-Za-z_]+)?(?P<rank>\d+)\]:")
_NUMBER = r"[-+]?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)"
_FIELDS = {
    "loss": re.compile(rf"\bloss:\s*(?P<v>{_NUMBER})", re.I),
    "grad_norm": re.compile(rf"\bgrad_norm:\s*(?P<v>{_NUMBER})", re.I),
    "memory": re.compile(
        rf"\bmemory:\s*(?P<v>{_NUMBER})\s*GiB\s*(?:\(\s*(?P<pct>{_NUMBER})\s*%\s*\))?", re.I
    ),
    "tps": re.compile(rf"\btps:\s*(?P<v>{_NUMBER})", re.I),
    "tflops": re.compile(rf"\btflops:\s*(?P<v>{_NUMBER})", re.I),
    "mfu": re.compile(rf"\bmfu:\s*(?P<v>{_NUMBER}|N/A)\s*%?", re.I),
    "elapsed": re.compile(rf"\belapsed_time_per_step:\s*(?P<v>{_NUMBER})\s*s?\b", re.I),
}


def _num(raw: str | None) -> float | None:
    """A float from a printed number (thousands separators allowed); None for N/A or absent."""
    if raw is None or raw.upper() == "N/A":
        return None
    return float(raw.replace(",", ""))


def parse_titan_log(
    text: str, *, world_size: int = 1, pattern: str = TITAN_STEP_PATTERN
) -> list[dict[str, Any]]:
    """Step records from torchtitan console output, in the order they appear.

    Args:
        text: the console output: ANSI colours, logger headers and torchrun's ``[rankN]:``
            prefixes allowed.
        world_size: processes of the job; ``tokens_per_s`` = ``tps`` x ``world_size``, since
            torchtitan's ``tps`` is per device.
        pattern: regex with a named group ``step`` picking the step lines
            (:data:`TITAN_STEP_PATTERN`: not ``validate step:``).

    Returns:
        One dict per step line: ``step`` (int), ``loss``, ``grad_norm``, ``memory_gib``
        (peak reserved, GiB), ``memory_pct`` (% of device memory), ``tps_per_device`` (tokens/s
        per device, as printed), ``tokens_per_s`` (whole job), ``tflops`` (per device),
        ``mfu_pct`` (None when printed ``N/A``), ``step_time_s`` (seconds, only when the line
        carries torchtitan-npu's ``elapsed_time_per_step``, else None), ``rank`` (from a
        ``[rankN]:`` prefix, else None) and ``line`` (1-based line number). A field missing
        from the line is None; ``nan``/``inf`` are kept as floats.
    """
    compiled = re.compile(pattern)
    records: list[dict[str, Any]] = []
    for lineno, raw_line in log_lines(text):
        match = compiled.search(raw_line)
        if match is None:
            continue
        prefix = _RANK_PREFIX.match(raw_line)
        rest = raw_line[match.start() :]
        found = {name: rx.search(rest) for name, rx in _FIELDS.items()}

        def value(name: str, group: str = "v") -> float | None:
            m = found[name]
            return _num(m.group(group)) if m is not None else None

        tps = value("tps")
        records.append(
            {
                "step": int(match.group("step")),
                "loss": value("loss"),
                "grad_norm": value("grad_norm"),
                "memory_gib": value("memory"),
                "memory_pct": value("memory", "pct"),
                "tps_per_device": tps,
                "tokens_per_s": tps * world_size if tps is not None else None,
                "tflops": value("tflops"),
                "mfu_pct": value("mfu"),
                "step_time_s": value("elapsed"),
                "rank": int(prefix.group("rank")) if prefix else None,
                "line": lineno,
            }
        )
    return records


def step_times_from_structured_logs(dump_dir: Path | str, rank: int = 0) -> dict[int, float]:
    """Wall time (seconds) of each training step of ``rank`` from torchtitan's structured logs.

    Reads ``<dump_dir>/structured_logs/*.global_rank_<rank>.*.jsonl`` and keeps the records
    ``"log_type_name": "step_end"`` (``value`` = the ``step`` span in ms: gc, train step,
    checkpoint, validation and profiler step). Steps that also have a ``step_error`` record
    are left out; lines that are not JSON (a line cut by a crash) are skipped.

    Returns:
        ``{step: seconds}`` sorted by step; empty when there are no structured logs
        (``--debug.no-enable-structured-logging``, or a torchtitan without them).

    Raises:
        InvalidLog: a step has more than one ``step_end`` record.
    """
    folder = Path(dump_dir) / "structured_logs"
    if not folder.is_dir():
        return {}
    times: dict[int, tuple[float, str]] = {}
    failed: set[int] = set()
    for path in sorted(folder.glob(f"*.global_rank_{rank}.*.jsonl")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, start=1):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                    continue
                kind, step = rec.get("log_type_name"), rec["step"]
                if kind == "step_error":
                    failed.add(step)
                elif kind == "step_end" and isinstance(rec.get("value"), (int, float)):
                    where = f"{path.name}:{lineno}"
                    if step in times:
                        raise InvalidLog(
                            f"{folder}: step {step} has two step_end records "
                            f"({times[step][1]} and {where})"
                        )
                    times[step] = (float(rec["value"]) / 1000.0, where)
    return {step: t for step, (t, _) in sorted(times.items()) if step not in failed}


def step_time_from_tps(tps_per_device: float, world_size: int, tokens_per_step: int) -> float:
    """Step time (seconds) implied by torchtitan's per-device ``tps``.

    ``tps = local tokens / (seconds x non-data-parallel size)`` and the job's tokens per step
    (``global_batch_size x seq_len``) are the local tokens x data-parallel size, so
    ``seconds = tokens_per_step / (tps x world_size)``. With ``--metrics.log_freq 1`` that is
    the time between two step lines; ``tps`` is printed rounded to an integer.

    Raises:
        ValueError: ``tps_per_device`` is not a positive finite number.
    """
    if not (tps_per_device > 0 and math.isfinite(tps_per_device)):
        raise ValueError(f"tps {tps_per_device} is not a positive finite number")
    return tokens_per_step / (tps_per_device * world_size)


def find_titan_traces(root: Path | str) -> dict[int, list[Path]]:
    """torchtitan profiler traces below ``root`` (a dump folder or a traces folder).

    Matches ``.../iteration_<step>/[<leaf>/]rank<rank>_trace.json[.gz]`` at any depth.

    Returns:
        ``{step: [paths sorted by rank]}`` sorted by step; ``step`` is the last training step
        of that profiling cycle. Empty when there are none.
    """
    name_rx = re.compile(r"^rank(\d+)_trace\.json(?:\.gz)?$")
    iter_rx = re.compile(r"^iteration_(\d+)$")
    found: dict[int, list[tuple[int, Path]]] = {}
    root = Path(root)
    if not root.is_dir():
        return {}
    for path in root.rglob("rank*_trace.json*"):
        m = name_rx.match(path.name)
        if m is None or not path.is_file():
            continue
        for parent in path.relative_to(root).parents:
            it = iter_rx.match(parent.name)
            if it:
                found.setdefault(int(it.group(1)), []).append((int(m.group(1)), path))
                break
    return {step: [p for _, p in sorted(v)] for step, v in sorted(found.items())}


def step_records(
    parsed: list[dict[str, Any]],
    *,
    tokens_per_step: int,
    world_size: int,
    structured: dict[int, float] | None = None,
    rank: int = 0,
    source: str = "torchtitan log",
) -> tuple[list[dict[str, Any]], str]:
    """afbench ``metrics.jsonl`` step records from parsed step lines of one rank.

    Lines of other ranks (by ``[rankN]:`` prefix) are dropped. ``step_time_s`` comes from, in
    order: the line's own ``elapsed_time_per_step`` (torchtitan-npu), the structured logs'
    ``step_end`` span, or :func:`step_time_from_tps`. Under pipeline parallelism torchtitan
    prints ``loss: -1`` on ranks that compute no loss: such a record has ``loss`` None and
    ``loss_placeholder`` True (neither a loss to compare nor a non-finite one).

    Returns:
        (records, source): records with ``step, step_time_s, loss, grad_norm, tokens,
        tokens_per_s, tps_per_device, tflops, mfu_pct, memory_gib, memory_pct,
        step_time_source`` (and ``loss_placeholder`` where set); ``source`` names the
        sources used (``"log"``, ``"structured_logs"``, ``"tps"``, joined with ``+`` when
        mixed, ``"none"`` without records).

    Raises:
        InvalidLog: the rank logs a step more than once (named ``source``, with the lines):
            no line of several silently wins.
    """
    structured = structured or {}
    out: list[dict[str, Any]] = []
    sources: list[str] = []
    mine = [rec for rec in parsed if rec["rank"] in (None, rank)]
    check_unique_steps([(rec["step"], rec["line"]) for rec in mine], source=source)
    for rec in mine:
        step = rec["step"]
        if rec["step_time_s"] is not None:
            t, src = rec["step_time_s"], "log"
        elif step in structured:
            t, src = structured[step], "structured_logs"
        elif rec["tps_per_device"] is not None and rec["tps_per_device"] > 0:
            t, src = step_time_from_tps(rec["tps_per_device"], world_size, tokens_per_step), "tps"
        else:
            t, src = None, "none"
        if src not in sources:
            sources.append(src)
        placeholder = is_placeholder_loss(rec["loss"])
        out.append(
            {
                "step": step,
                "step_time_s": t,
                "loss": None if placeholder else rec["loss"],
                "grad_norm": rec["grad_norm"],
                "tokens": tokens_per_step,
                "tokens_per_s": rec["tokens_per_s"],
                "tps_per_device": rec["tps_per_device"],
                "tflops": rec["tflops"],
                "mfu_pct": rec["mfu_pct"],
                "memory_gib": rec["memory_gib"],
                "memory_pct": rec["memory_pct"],
                "step_time_source": src,
                **({"loss_placeholder": True} if placeholder else {}),
            }
        )
    return out, "+".join(sources) or "none"
