"""Kernel (op type) tables from profiler output, and their baseline/variant diff.

The normalised table has columns :data:`KERNEL_COLUMNS`, one row per op type, sorted by
``total_us`` descending:

- ``op_type`` (str): kernel/op type, e.g. ``MatMul``, ``AddRmsNorm``, ``aten::pow``;
- ``count`` (int): number of launches;
- ``total_us`` (float): summed device duration, microseconds;
- ``ratio_pct`` (float): ``total_us / sum(total_us) * 100`` over the whole table.

Sources (torch_npu profiler, ``ASCEND_PROFILER_OUTPUT/``), parsed by column name, ignoring
case, surrounding whitespace, a BOM and a space before ``(``:

- ``kernel_details.csv``: optional ``Step Id``, then ``Device_id, Name, Type, Accelerator
  Core, Start Time(us), Duration(us), Wait Time(us), Block Num``, then shape/dtype/format and
  optional metric columns; one row per kernel launch.
- ``op_statistic.csv``: optional ``Device_id`` or ``Model Name``, then ``OP Type, Core Type,
  Count, Total Time(us), Min Time(us), Avg Time(us), Max Time(us), Ratio(%)``; one row per
  (op type, core type[, device]).
- ``kernel_table.csv``: afbench's own table, already in :data:`KERNEL_COLUMNS` form.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from afbench.analysis.timestamps import ns_to_us, us_to_ns

KERNEL_COLUMNS = ["op_type", "count", "total_us", "ratio_pct"]
#: Optional fifth column of tables read from per-launch sources (``kernel_details.csv``,
#: ``trace_view.json``): the distinct kernel names of the op type, sorted, joined by ``"; "``
#: (``aclnnPowTensorScalar_PowAiCore_Pow``), so a table keyed by op type keeps them.
KERNEL_NAMES = "kernel_names"
NAMES_SEP = "; "

KERNEL_TABLE_FILENAME = "kernel_table.csv"
OP_STATISTIC_FILENAME = "op_statistic.csv"
KERNEL_DETAILS_FILENAME = "kernel_details.csv"
TRACE_VIEW_FILENAME = "trace_view.json"  # torch_npu's Chrome trace (afbench.analysis.traces)
# which file a profile folder's op table is read from, and why none is found:
# afbench.analysis.op_table (also the reader of torch_npu's .db export)


def _column_key(name: object) -> str:
    """Lookup key of a header: no BOM, lower case, single spaces, no space around ``(``."""
    text = re.sub(r"\s+", " ", str(name).replace("\ufeff", "").strip().lower())
    text = re.sub(r"\s*\(\s*", "(", text)
    return re.sub(r"\s*\)", ")", text)


def _read_csv(path: Path, dtype: type | None = None) -> pd.DataFrame:
    try:
        return pd.read_csv(path, encoding="utf-8-sig", skipinitialspace=True, dtype=dtype)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV: {exc}") from exc


def _pick(df: pd.DataFrame, path: Path, name: str, *aliases: str) -> pd.Series:
    """Column ``name`` (or an alias) matched by :func:`_column_key`; ValueError if absent."""
    keys = {_column_key(c): c for c in df.columns}
    for candidate in (name, *aliases):
        key = _column_key(candidate)
        if key in keys:
            return df[keys[key]]
    raise ValueError(f"{path}: missing column {name!r}; found {list(df.columns)}")


def _numbers(series: pd.Series, path: Path, column: str) -> pd.Series:
    """Float values of a column; torch_npu pads some cells with a tab, so strings are stripped.

    Raises:
        ValueError: a cell is empty or not a number (names file, column and CSV line).
    """
    raw = series
    if not pd.api.types.is_numeric_dtype(series):
        raw = series.astype(object).map(lambda v: v.strip() if isinstance(v, str) else v)
    values = pd.to_numeric(raw, errors="coerce").astype(float)
    bad = values.isna()
    if bad.any():
        first = int(bad.to_numpy().nonzero()[0][0])
        raise ValueError(
            f"{path}: column {column!r} has an empty or non-numeric value "
            f"{series.iloc[first]!r} on line {first + 2}"
        )
    return values


def _op_types(series: pd.Series) -> pd.Series:
    return series.astype(object).map(lambda v: "<unknown>" if pd.isna(v) else str(v).strip())


def build_kernel_table(df: pd.DataFrame) -> pd.DataFrame:
    """Normalise ``op_type, count, total_us`` rows into a :data:`KERNEL_COLUMNS` table.

    Rows with the same ``op_type`` are summed, ``ratio_pct`` is recomputed over the whole
    table (0 when the total is 0), rows are sorted by ``total_us`` descending then
    ``op_type``. Useful for tables built from other profilers (e.g. torch.profiler). An input
    :data:`KERNEL_NAMES` column (one name, or names joined by ``"; "``) is kept, merged per
    op type.
    """
    frame = pd.DataFrame(
        {
            "op_type": df["op_type"].astype(str).to_numpy(),
            "count": df["count"].astype("int64").to_numpy(),
            "total_us": df["total_us"].astype(float).to_numpy(),
        }
    )
    grouped = frame.groupby("op_type", as_index=False, sort=False).sum()
    columns = list(KERNEL_COLUMNS)
    if KERNEL_NAMES in df:
        names: dict[str, set[str]] = {}
        for op, joined in zip(frame["op_type"], df[KERNEL_NAMES].fillna("").astype(str)):
            names.setdefault(op, set()).update(n for n in joined.split(NAMES_SEP) if n)
        grouped[KERNEL_NAMES] = [NAMES_SEP.join(sorted(names[op])) for op in grouped["op_type"]]
        columns.append(KERNEL_NAMES)
    total = float(grouped["total_us"].sum())
    grouped["ratio_pct"] = grouped["total_us"] / total * 100.0 if total > 0 else 0.0
    grouped = grouped.sort_values(
        ["total_us", "op_type"], ascending=[False, True], kind="mergesort"
    ).reset_index(drop=True)
    return grouped[columns].astype(
        {"op_type": str, "count": "int64", "total_us": float, "ratio_pct": float}
    )


def read_kernel_details(path: Path | str) -> pd.DataFrame:
    """Kernel table from torch_npu ``kernel_details.csv``: rows grouped by ``Type``,
    ``count`` = launches, ``total_us`` = sum of ``Duration(us)``, over all steps and devices
    in the file; the ``Name`` of each launch kept in :data:`KERNEL_NAMES` (when the file has
    the column).

    Raises:
        ValueError: file empty/unreadable, column ``Type`` or ``Duration(us)`` missing, or a
            duration that is not a number.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    df = _read_csv(path)
    types = _op_types(_pick(df, path, "Type"))
    durations = _numbers(_pick(df, path, "Duration(us)"), path, "Duration(us)")
    names = (
        _op_types(_pick(df, path, "Name"))
        if _column_key("Name") in {_column_key(c) for c in df.columns}
        else None
    )
    keys = [
        op_type_of(t, n) for t, n in zip(types, names if names is not None else [None] * len(types))
    ]
    rows = pd.DataFrame({"op_type": keys, "count": 1, "total_us": durations.to_numpy()})
    if names is not None:
        rows[KERNEL_NAMES] = names.to_numpy()
    return build_kernel_table(rows)


#: torch_npu's kernel names of aclnn operators: ``aclnn<API>_<implementation>_<OP Type>``
#: (``aclnnPowTensorScalar_PowAiCore_Pow`` is a ``Pow``) or, for an operator with a single
#: implementation, ``aclnn<API>_<OP Type>`` (``aclnnAddRmsNorm_AddRmsNorm`` is an
#: ``AddRmsNorm``): the Name/Type pairs of ``kernel_details.csv``.
_ACLNN_KERNEL = re.compile(r"^aclnn[A-Za-z0-9]+_(?:.+_)?(?P<type>[A-Za-z][A-Za-z0-9]*)$")
#: ``Type`` cells that name no type (torch_npu writes ``N/A`` where it has none).
_NO_TYPE = {"", "n/a", "na", "none", "null", "<unknown>"}


def kernel_op_type(name: str, known: dict[str, str] | None = None) -> str:
    """The op type (``kernel_details.csv``'s ``Type``) of a device kernel named ``name`` in a
    trace: ``known[name]`` when given (Name -> Type of a ``kernel_details.csv`` of the same
    profile), else the last part of an aclnn kernel name (``aclnnMul_MulAiCore_Mul`` ->
    ``Mul``), else ``name`` itself (a generated kernel such as ``autofused_add_mul_0``, or a
    CUDA kernel, is its own type)."""
    if known and name in known:
        return known[name]
    match = _ACLNN_KERNEL.match(name)
    return match.group("type") if match else name


def op_type_of(type_cell: object, name: object = None) -> str:
    """The op type of one launch given its ``Type`` cell and kernel ``Name`` (either may be
    ``None``): the type, or the name where the type names none (``N/A``, empty), resolved by
    :func:`kernel_op_type`, so that every format keys a launch alike
    (``aclnnAddRmsNorm_AddRmsNorm`` with no type is an ``AddRmsNorm``)."""
    text = "" if type_cell is None or pd.isna(type_cell) else str(type_cell).strip()
    if text.lower() in _NO_TYPE and name is not None and not pd.isna(name):
        text = str(name).strip()
    return kernel_op_type(text) if text else "<unknown>"


def kernel_types(profile_dir: Path | str) -> dict[str, str]:
    """Name -> Type of every launch in the ``kernel_details.csv`` files below
    ``profile_dir`` (empty when there is none, or a file lacks ``Name`` or ``Type``).

    Raises:
        OSError: a file cannot be opened; ValueError: a file is empty or unreadable.
    """
    out: dict[str, str] = {}
    for path in find_kernel_details(profile_dir):
        df = _read_csv(path)
        keys = {_column_key(c) for c in df.columns}
        if {_column_key("Name"), _column_key("Type")} <= keys:
            out.update(zip(_op_types(_pick(df, path, "Name")), _op_types(_pick(df, path, "Type"))))
    return out


#: Columns of :attr:`StepDeviceTime.table`.
STEP_DEVICE_COLUMNS = ["step", "device_id", "kernels", "kernel_us", "span_us"]


@dataclass
class StepDeviceTime:
    """Device time per profiled step from ``kernel_details.csv``.

    Attributes:
        table: one row per (``Step Id``, ``Device_id``), columns :data:`STEP_DEVICE_COLUMNS`:
            ``step`` (int, torch_npu's profiler step, numbered like ``step_trace_time.csv``
            ``Step``), ``device_id`` (str; empty without a ``Device_id`` column),
            ``kernels`` (int launches), ``kernel_us`` (float, summed ``Duration(us)``) and
            ``span_us`` (float, first kernel start to last kernel end, from exact integer
            nanoseconds); ``None`` when the file has no ``Step Id`` column.
        note: empty, or why there is no table (``"per-step breakdown unavailable: ..."``).
    """

    table: pd.DataFrame | None
    note: str = ""


def kernel_details_per_step(path: Path | str) -> StepDeviceTime:
    """Device time per step of torch_npu ``kernel_details.csv`` (needs its optional leading
    ``Step Id`` column, written when the profiler ran with a schedule).

    ``Start Time(us)`` is absolute microseconds with a nanosecond fraction and, as torch_npu
    writes it, a trailing tab; shape columns are quoted and hold commas
    (``"4,1024;2048,1024"``). Both parse.

    Raises:
        ValueError: file empty/unreadable, ``Duration(us)`` or ``Start Time(us)`` missing, or
            a step, start or duration that is not a number.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    df = _read_csv(path, dtype=str)  # as text: a float64 start time loses its nanoseconds
    keys = {_column_key(c) for c in df.columns}
    if _column_key("Step Id") not in keys:
        return StepDeviceTime(
            None, f"per-step breakdown unavailable: no 'Step Id' column in {path}"
        )
    steps = _numbers(_pick(df, path, "Step Id"), path, "Step Id").astype("int64")
    durations = _numbers(_pick(df, path, "Duration(us)"), path, "Duration(us)")
    starts_raw = _pick(df, path, "Start Time(us)")
    try:
        starts = [us_to_ns(v) for v in starts_raw]
        ends = [s + us_to_ns(d) for s, d in zip(starts, _pick(df, path, "Duration(us)"))]
    except ValueError as exc:
        raise ValueError(f"{path}: column 'Start Time(us)' or 'Duration(us)': {exc}") from None
    devices = (
        _pick(df, path, "Device_id").astype(str).str.strip()
        if _column_key("Device_id") in keys
        else pd.Series([""] * len(df))
    )
    frame = pd.DataFrame(
        {
            "step": steps.to_numpy(),
            "device_id": devices.to_numpy(),
            "dur": durations.to_numpy(),
            "start": starts,
            "end": ends,
        }
    )
    table = (
        frame.groupby(["step", "device_id"], sort=True)
        .agg(
            kernels=("dur", "size"),
            kernel_us=("dur", "sum"),
            first=("start", "min"),
            last=("end", "max"),
        )
        .reset_index()
    )
    table["span_us"] = [ns_to_us(int(b) - int(a)) for a, b in zip(table["first"], table["last"])]
    return StepDeviceTime(
        table[STEP_DEVICE_COLUMNS].astype({"kernels": "int64", "kernel_us": float})
    )


def read_op_statistic(path: Path | str) -> pd.DataFrame:
    """Kernel table from torch_npu ``op_statistic.csv``: ``Count`` and ``Total Time(us)``
    summed per ``OP Type`` over core types (and devices); ``Ratio(%)`` is recomputed.

    Raises:
        ValueError: file empty/unreadable, column ``OP Type``, ``Count`` or
            ``Total Time(us)`` missing, or a non-numeric count/time.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    df = _read_csv(path)
    types = _pick(df, path, "OP Type", "op_type", "optype")
    counts = _numbers(_pick(df, path, "Count"), path, "Count")
    totals = _numbers(_pick(df, path, "Total Time(us)"), path, "Total Time(us)")
    return build_kernel_table(
        pd.DataFrame(
            {
                "op_type": [kernel_op_type(t) for t in _op_types(types)],
                "count": counts,
                "total_us": totals,
            }
        )
    )


def read_kernel_table(path: Path | str) -> pd.DataFrame:
    """Read afbench's own ``kernel_table.csv`` (columns :data:`KERNEL_COLUMNS`, and
    :data:`KERNEL_NAMES` when written).

    ``ratio_pct`` is kept as written (the table may be a top-N of a larger one); rows are
    re-sorted by ``total_us`` descending.

    Raises:
        ValueError: file empty/unreadable, a column missing or a non-numeric value.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    df = _read_csv(path)
    out = pd.DataFrame(
        {
            "op_type": _op_types(_pick(df, path, "op_type")),
            "count": _numbers(_pick(df, path, "count"), path, "count").astype("int64"),
            "total_us": _numbers(_pick(df, path, "total_us"), path, "total_us"),
            "ratio_pct": _numbers(_pick(df, path, "ratio_pct"), path, "ratio_pct"),
        }
    )
    columns = list(KERNEL_COLUMNS)
    if _column_key(KERNEL_NAMES) in {_column_key(c) for c in df.columns}:
        out[KERNEL_NAMES] = _pick(df, path, KERNEL_NAMES).fillna("").astype(str).to_numpy()
        columns.append(KERNEL_NAMES)
    out = out.sort_values(["total_us", "op_type"], ascending=[False, True], kind="mergesort")
    return out.reset_index(drop=True)[columns].astype({"op_type": str})


def _find_all(root: Path, filename: str) -> list[Path]:
    return sorted(
        Path(dirpath) / filename for dirpath, _d, files in os.walk(root) if filename in files
    )


def find_kernel_details(profile_dir: Path | str) -> list[Path]:
    """Every torch_npu ``kernel_details.csv`` below ``profile_dir`` (one per profiled rank),
    sorted; empty when there is none or the folder does not exist."""
    root = Path(profile_dir)
    return _find_all(root, KERNEL_DETAILS_FILENAME) if root.is_dir() else []


def top_n(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` op types with the largest ``total_us`` (ratios stay relative to the full
    table).

    Raises:
        ValueError: ``n < 0``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    ordered = df.sort_values(["total_us", "op_type"], ascending=[False, True], kind="mergesort")
    return ordered.head(n).reset_index(drop=True)


def diff_kernel_tables(baseline: pd.DataFrame, variant: pd.DataFrame) -> pd.DataFrame:
    """Per-op-type difference of two kernel tables (variant minus baseline).

    Returns:
        Columns ``op_type, count_baseline, count_variant, count_delta, total_us_baseline,
        total_us_variant, total_us_delta`` (counts int, times µs); an outer join where an op
        type absent on one side counts 0; sorted by ``|total_us_delta|`` descending, then
        ``op_type``.
    """

    def side(df: pd.DataFrame) -> pd.DataFrame:
        return (
            pd.DataFrame(
                {
                    "op_type": df["op_type"].astype(str).to_numpy(),
                    "count": df["count"].astype("int64").to_numpy(),
                    "total_us": df["total_us"].astype(float).to_numpy(),
                }
            )
            .groupby("op_type", sort=False)
            .sum()
        )

    merged = pd.merge(
        side(baseline),
        side(variant),
        how="outer",
        left_index=True,
        right_index=True,
        suffixes=("_baseline", "_variant"),
    )
    merged = merged.fillna(0).reset_index()
    for col in ("count_baseline", "count_variant"):
        merged[col] = merged[col].astype("int64")
    merged["count_delta"] = merged["count_variant"] - merged["count_baseline"]
    merged["total_us_delta"] = merged["total_us_variant"] - merged["total_us_baseline"]
    merged["_abs"] = merged["total_us_delta"].abs()
    merged = merged.sort_values(["_abs", "op_type"], ascending=[False, True], kind="mergesort")
    columns = [
        "op_type",
        "count_baseline",
        "count_variant",
        "count_delta",
        "total_us_baseline",
        "total_us_variant",
        "total_us_delta",
    ]
    return merged[columns].reset_index(drop=True).astype({"op_type": str})
