"""Profiling status from torch_npu's ``step_trace_time.csv`` (explains, never overrides, the
verdict).

Source format (torch_npu profiler, ``export_type=Text``): one file per profiled process at
``<host>_<pid>_<ts>_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv`` with columns
``Device_id, Step, Computing, Communication(Not Overlapped), Overlapped, Communication, Free,
Stage, Bubble, Communication(Not Overlapped and Exclude Receive), Preparing``; one row per
profiled step, times in microseconds. Some documentation writes a space before the
parenthesis (``Communication (Not Overlapped)``); both spellings are accepted.

Rules (docs/reference.md §1): per side exactly one file; exactly the expected steps (profiler steps
5..9 for training steps 6..10), each once, on one ``Device_id``; phase values finite and
>= 0; both sides on the same ``Device_id``. ``Overlapped`` is communication hidden under
computation, so it is never added to the other phases.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from afbench.analysis.errors import ProfileIncomparable, ProfileUnavailable

STEP_TRACE_FILENAME = "step_trace_time.csv"

#: Phases compared side by side, microseconds per step.
PHASE_COLUMNS = ["Computing", "Communication(Not Overlapped)", "Overlapped", "Free", "Stage"]

#: Every column torch_npu writes, in its order.
STEP_TRACE_COLUMNS = [
    "Device_id",
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
]

REQUIRED_COLUMNS = ["Device_id", "Step", *PHASE_COLUMNS]

#: Profiler steps of the AF OFF/ON profile runs (profile_step_start 6 .. end 11 writes
#: steps 5..9, which map to training steps 6..10).
DEFAULT_PROFILE_STEPS = [5, 6, 7, 8, 9]

COMPARABLE = "COMPARABLE"
UNAVAILABLE = "UNAVAILABLE"
INCOMPARABLE = "INCOMPARABLE"


def _tidy_name(name: object) -> str:
    """Strip BOM and whitespace, collapse inner whitespace, drop spaces around parentheses."""
    text = re.sub(r"\s+", " ", str(name).replace("\ufeff", "").strip())
    text = re.sub(r"\s*\(\s*", "(", text)
    return re.sub(r"\s*\)", ")", text)


def _match_key(name: str) -> str:
    return re.sub(r"[\s_]", "", name.lower())


_CANONICAL = {_match_key(c): c for c in STEP_TRACE_COLUMNS}


def normalise_step_trace_columns(columns: Sequence[object]) -> list[str]:
    """Canonical names for ``step_trace_time.csv`` headers.

    Known columns are matched ignoring case, whitespace and ``_`` and renamed to torch_npu's
    spelling (``Communication (Not Overlapped)`` -> ``Communication(Not Overlapped)``,
    ``Device_Id`` -> ``Device_id``); unknown columns are kept, whitespace-tidied.
    """
    out = []
    for col in columns:
        tidy = _tidy_name(col)
        out.append(_CANONICAL.get(_match_key(tidy), tidy))
    return out


def find_step_trace(profile_dir: Path | str) -> Path:
    """The single ``step_trace_time.csv`` anywhere below ``profile_dir``.

    Raises:
        ProfileUnavailable: the directory does not exist, or holds no such file, or several
            (e.g. two profiled processes, or a stale run left in the directory).
    """
    root = Path(profile_dir)
    if not root.is_dir():
        raise ProfileUnavailable(f"profile directory {root} does not exist")
    found = sorted(
        Path(dirpath) / STEP_TRACE_FILENAME
        for dirpath, _dirs, files in os.walk(root)
        if STEP_TRACE_FILENAME in files
    )
    found = [p for p in found if p.is_file()]
    if not found:
        raise ProfileUnavailable(f"no {STEP_TRACE_FILENAME} below {root}")
    if len(found) > 1:
        listed = ", ".join(str(p) for p in found)
        raise ProfileUnavailable(
            f"{len(found)} {STEP_TRACE_FILENAME} files below {root} (expected one): {listed}"
        )
    return found[0]


def read_step_trace(path: Path | str) -> pd.DataFrame:
    """Read a ``step_trace_time.csv`` into a DataFrame, one row per profiled step.

    Column names are normalised (see :func:`normalise_step_trace_columns`); extra columns
    are kept. Values are as pandas reads them; :func:`validate_step_trace` checks them.

    Raises:
        ProfileUnavailable: the file cannot be read.
        ProfileIncomparable: it is empty or not CSV, a required column (``Device_id``,
            ``Step`` or a :data:`PHASE_COLUMNS` entry) is missing, or two headers normalise
            to the same name.
    """
    path = Path(path)
    try:
        df = pd.read_csv(path, encoding="utf-8-sig", skipinitialspace=True)
    except OSError as exc:
        raise ProfileUnavailable(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except pd.errors.EmptyDataError:
        raise ProfileIncomparable(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ProfileIncomparable(f"{path}: not a readable CSV: {exc}") from exc
    df.columns = normalise_step_trace_columns(list(df.columns))
    dupes = sorted({c for c in df.columns if list(df.columns).count(c) > 1})
    if dupes:
        raise ProfileIncomparable(f"{path}: column(s) {dupes} appear more than once")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ProfileIncomparable(
            f"{path}: missing column(s) {', '.join(repr(c) for c in missing)}; "
            f"found {list(df.columns)}"
        )
    return df


def _to_numeric(series: pd.Series) -> pd.Series:
    """Numbers of a column, NaN where a cell is empty or not a number.

    torch_npu pads some cells with tabs/spaces, so strings are stripped first.
    """
    if not pd.api.types.is_numeric_dtype(series):
        series = series.astype(object).map(lambda v: v.strip() if isinstance(v, str) else v)
    return pd.to_numeric(series, errors="coerce").astype(float)


def _device_id(value: object) -> int | str:
    """Device_id as an int when it is one (``0``, ``0.0``, ``"0"``), else a stripped string."""
    if isinstance(value, str):
        text = value.strip()
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else text
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if math.isfinite(number) and number.is_integer():
        return int(number)
    return str(value)


def _fmt_steps(steps: Sequence[object]) -> str:
    return "[" + ", ".join(str(s) for s in steps) + "]"


def validate_step_trace(
    df: pd.DataFrame, expected_steps: Sequence[int], *, source: str = "step_trace_time.csv"
) -> None:
    """Check a step trace against the comparison rules; return ``None`` if it holds.

    Args:
        df: as returned by :func:`read_step_trace`.
        expected_steps: profiler step numbers that must each appear exactly once
            (e.g. :data:`DEFAULT_PROFILE_STEPS`).
        source: file name used in messages.

    Raises:
        ValueError: ``expected_steps`` is empty or has duplicates.
        ProfileIncomparable: a required column is missing; the row count differs from
            ``len(expected_steps)``; a step is non-integer, duplicated, missing or
            unexpected; ``Device_id`` is empty or takes more than one value; a phase value is
            empty, non-numeric, infinite or negative. The message lists every problem found.
    """
    expected = list(expected_steps)
    if not expected:
        raise ValueError("expected_steps is empty")
    if len(set(expected)) != len(expected):
        raise ValueError(f"expected_steps has duplicates: {expected}")

    missing_cols = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing_cols:
        raise ProfileIncomparable(
            f"{source}: missing column(s) {', '.join(repr(c) for c in missing_cols)}"
        )

    problems: list[str] = []
    if len(df) != len(expected):
        problems.append(f"{len(df)} rows, expected {len(expected)} (steps {_fmt_steps(expected)})")

    steps = _to_numeric(df["Step"])
    bad_steps = df["Step"][~(steps.notna() & (steps % 1 == 0))]
    if len(bad_steps):
        problems.append(f"Step has non-integer or empty value(s) {list(bad_steps)}")
    int_steps = [int(s) for s in steps.dropna() if float(s).is_integer()]
    dup = sorted({s for s in int_steps if int_steps.count(s) > 1})
    if dup:
        problems.append(f"duplicate step(s) {_fmt_steps(dup)}")
    absent = [s for s in expected if s not in int_steps]
    extra = sorted({s for s in int_steps if s not in expected})
    if absent:
        problems.append(f"missing step(s) {_fmt_steps(absent)}")
    if extra:
        problems.append(f"unexpected step(s) {_fmt_steps(extra)}")

    devices = df["Device_id"]
    if devices.isna().any():
        problems.append("Device_id is empty in some row(s)")
    ids = sorted({_device_id(v) for v in devices.dropna()}, key=str)
    if len(ids) > 1:
        problems.append(f"mixed Device_id values {_fmt_steps(ids)} (expected one device)")

    for col in PHASE_COLUMNS:
        values = _to_numeric(df[col])
        for label, mask in (
            ("empty or non-numeric", values.isna()),
            ("infinite", values.isin([math.inf, -math.inf])),
            ("negative", values < 0),
        ):
            if mask.any():
                where = ", ".join(
                    f"step {s}: {v!r}" for s, v in zip(df["Step"][mask], df[col][mask])
                )
                problems.append(f"{col!r} has {label} value(s) ({where})")

    if problems:
        raise ProfileIncomparable(f"{source}: " + "; ".join(problems))


#: Codes of :attr:`ProfilingResult.parts`: a side's profile run failed, has no profile
#: directory, its files do not read or validate (the detail says how), the sides ran on
#: different devices, or both hold the expected steps (detail: the steps, e.g. ``[6, 7]``).
REASON_CODES = ("run_failed", "no_dir", "error", "devices", "ok")


@dataclass
class ProfilingResult:
    """Profiling status of a baseline/variant pair.

    Attributes:
        status: :data:`COMPARABLE`, :data:`UNAVAILABLE` or :data:`INCOMPARABLE`.
        reason: one line saying why (which side, which file, what is wrong).
        parts: the same, structured for a report in any language: one ``(side, code,
            detail)`` per clause of ``reason``; ``side`` is ``"baseline"``, ``"variant"`` or
            ``None``; ``code`` one of :data:`REASON_CODES`; ``detail`` the parser's own
            message (``error``), the steps checked (``ok``), else ``""``.
        means: when COMPARABLE, per-phase means in microseconds: index = :data:`PHASE_COLUMNS`,
            columns ``baseline`` and ``variant``; else ``None``. No total is computed:
            ``Overlapped`` overlaps ``Computing`` and must not be added to it.
        device_ids: ``{"baseline": id, "variant": id}`` for the sides that were read.
        paths: the ``step_trace_time.csv`` found for each side.
    """

    status: str
    reason: str
    means: pd.DataFrame | None = None
    parts: list[tuple[str | None, str, str]] = field(default_factory=list)
    device_ids: dict[str, int | str] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)


def profiling_status(
    baseline_dir: Path | str | None,
    variant_dir: Path | str | None,
    expected_steps: Sequence[int] = DEFAULT_PROFILE_STEPS,
    baseline_failed: bool = False,
    variant_failed: bool = False,
) -> ProfilingResult:
    """Decide whether the two profile runs can be compared phase by phase.

    Args:
        baseline_dir, variant_dir: profiler output directories (``save_traces_folder``);
            ``None`` when the run produced none.
        expected_steps: profiler step numbers each side must hold exactly once.
        baseline_failed, variant_failed: the profile run exited non-zero or was skipped.

    Returns:
        ``UNAVAILABLE`` if a run failed, a directory is missing, or a side has no or several
        ``step_trace_time.csv``; else ``INCOMPARABLE`` if a side fails
        :func:`validate_step_trace` or the sides ran on different ``Device_id``; else
        ``COMPARABLE`` with per-phase means (µs). Never raises for bad input data.
    """
    sides = {
        "baseline": (baseline_dir, baseline_failed),
        "variant": (variant_dir, variant_failed),
    }
    paths: dict[str, Path] = {}
    unavailable: list[tuple[str | None, str, str]] = []
    for side, (directory, failed) in sides.items():
        if failed:
            unavailable.append((side, "run_failed", ""))
        elif directory is None:
            unavailable.append((side, "no_dir", ""))
        else:
            try:
                paths[side] = find_step_trace(directory)
            except ProfileUnavailable as exc:
                unavailable.append((side, "error", str(exc)))
    if unavailable:
        return _result(UNAVAILABLE, unavailable, paths=paths)

    frames: dict[str, pd.DataFrame] = {}
    incomparable: list[tuple[str | None, str, str]] = []
    for side, path in paths.items():
        try:
            df = read_step_trace(path)
        except ProfileUnavailable as exc:
            return _result(UNAVAILABLE, [(side, "error", str(exc))], paths=paths)
        except ProfileIncomparable as exc:
            incomparable.append((side, "error", str(exc)))
            continue
        try:
            validate_step_trace(df, expected_steps, source=str(path))
        except ProfileIncomparable as exc:
            incomparable.append((side, "error", str(exc)))
            continue
        frames[side] = df

    device_ids = {side: _device_id(df["Device_id"].iloc[0]) for side, df in frames.items()}
    if incomparable:
        return _result(INCOMPARABLE, incomparable, device_ids=device_ids, paths=paths)
    if device_ids["baseline"] != device_ids["variant"]:
        return _result(INCOMPARABLE, [(None, "devices", "")], device_ids=device_ids, paths=paths)

    means = pd.DataFrame(
        {
            side: [float(_to_numeric(frames[side][col]).mean()) for col in PHASE_COLUMNS]
            for side in ("baseline", "variant")
        },
        index=pd.Index(PHASE_COLUMNS, name="phase"),
    )
    return _result(
        COMPARABLE,
        [(None, "ok", _fmt_steps(list(expected_steps)))],
        means=means,
        device_ids=device_ids,
        paths=paths,
    )


def reason_text(
    parts: Sequence[tuple[str | None, str, str]], device_ids: dict[str, int | str]
) -> str:
    """The English one-liner of :attr:`ProfilingResult.parts` (``"; "``-joined clauses)."""
    clauses = []
    for side, code, detail in parts:
        if code == "run_failed":
            clauses.append(f"{side} profile run failed")
        elif code == "no_dir":
            clauses.append(f"{side} has no profile directory")
        elif code == "error":
            clauses.append(f"{side}: {detail}")
        elif code == "devices":
            clauses.append(
                f"different Device_id: baseline {device_ids['baseline']}, "
                f"variant {device_ids['variant']}"
            )
        else:
            clauses.append(
                f"both sides hold steps {detail} once each on Device_id {device_ids['baseline']}"
            )
    return "; ".join(clauses)


def _result(status: str, parts: list[tuple[str | None, str, str]], **kw: Any) -> ProfilingResult:
    return ProfilingResult(status, reason_text(parts, kw.get("device_ids", {})), parts=parts, **kw)
