"""The op table of one profile folder, in every format torch_npu (or afbench) writes, and the
typed rows it hands to the store.

Formats, searched recursively below the folder (``*_ascend_pt/ASCEND_PROFILER_OUTPUT/``), in
this order of preference (the first kind found is read; several files of it, one per
profiled rank, are summed):

1. ``kernel_table.csv``: afbench's own table
   (:func:`afbench.analysis.kernels.read_kernel_table`);
2. ``op_statistic.csv``: torch_npu's per-type statistics
   (:func:`~afbench.analysis.kernels.read_op_statistic`);
3. ``kernel_details.csv``, with or without ``Step Id``: one row per launch
   (:func:`~afbench.analysis.kernels.read_kernel_details`);
4. ``ascend_pytorch_profiler_<rank>.db``: torch_npu's ``export_type=Db`` export
   (:func:`read_profiler_db`);
5. ``trace_view.json``: the device kernels of its ``Ascend Hardware`` track
   (:func:`afbench.analysis.traces.read_trace`);
6. the last resort, a torch.profiler chrome trace (``trace.json``, torchtitan's
   ``rank<r>_trace.json[.gz]``): its device kernels (CUDA kernels are their own type).

Every format keys its rows by op type (``kernel_details.csv``'s ``Type``): an aclnn kernel
name resolves to its type (:func:`afbench.analysis.kernels.kernel_op_type`), so a diff of
two formats lists each op type once.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from afbench.analysis import kernels as K
from afbench.analysis.timestamps import ns_to_us

#: torch_npu's Db export, one per profiled rank: ``ascend_pytorch_profiler_{Rank_ID}.db``
#: (``ascend_pytorch_profiler.db`` without a rank).
PROFILER_DB_PREFIX, PROFILER_DB_SUFFIX = "ascend_pytorch_profiler", ".db"

#: Why a profile folder has no op table (:attr:`OpTable.problem`): no file of any format;
#: a file that holds no device kernels (a graph-mode trace whose kernels were not exported);
#: a file that does not parse.
NO_SOURCE, NO_KERNELS, UNREADABLE = "no_source", "no_kernels", "unreadable"


@dataclass(frozen=True)
class OpRow:
    """One op type of an op table: the record the readers hand to the store
    (``afbench.store.KernelRow`` has the same fields; tests/test_profile_formats.py checks it).

    Attributes:
        op_type: ``kernel_details.csv``'s ``Type`` (``MatMul``, ``AddRmsNorm``), a generated
            kernel's own name (``autofused_add_mul_0``), or a torch.profiler op (``aten::mm``).
        count: launches.
        total_us: summed device duration, microseconds.
        ratio_pct: ``total_us`` as a percentage of the whole table's.
        kernel_names: the distinct kernel names behind the type, sorted (empty where the
            format names none: ``op_statistic.csv``).
    """

    op_type: str
    count: int
    total_us: float
    ratio_pct: float
    kernel_names: tuple[str, ...] = ()


def op_rows(table: pd.DataFrame) -> list[OpRow]:
    """The rows of a kernel table (:data:`afbench.analysis.kernels.KERNEL_COLUMNS`, and
    :data:`~afbench.analysis.kernels.KERNEL_NAMES` when it has it), in its order, as
    :class:`OpRow`. Only those columns are read: any other column a reader adds is left out.
    """
    names = table[K.KERNEL_NAMES] if K.KERNEL_NAMES in table else [None] * len(table)
    return [
        OpRow(
            op_type=str(op),
            count=int(count),
            total_us=float(total),
            ratio_pct=float(ratio),
            kernel_names=_names(joined),
        )
        for op, count, total, ratio, joined in zip(
            table["op_type"], table["count"], table["total_us"], table["ratio_pct"], names
        )
    ]


def _names(joined: object) -> tuple[str, ...]:
    if not isinstance(joined, str):  # None, or NaN where a table without names was concatenated
        return ()
    return tuple(sorted({n for n in joined.split(K.NAMES_SEP) if n}))


# summed in SQLite (exact integers): a long profile's millions of tasks never reach Python
_DB_QUERY = """
SELECT op_type.value, name.value, COUNT(*), SUM(t.endNs - t.startNs),
       SUM(typeof(t.startNs) != 'integer' OR typeof(t.endNs) != 'integer')
FROM COMPUTE_TASK_INFO AS c
JOIN TASK AS t ON t.globalTaskId = c.globalTaskId
LEFT JOIN STRING_IDS AS op_type ON op_type.id = c.opType
LEFT JOIN STRING_IDS AS name ON name.id = c.name
GROUP BY c.opType, c.name
"""


def read_profiler_db(path: Path | str) -> pd.DataFrame:
    """Kernel table from torch_npu's ``ascend_pytorch_profiler_<rank>.db`` (``export_type=Db``).

    Schema (Ascend's "Data in ascend_pytorch_profiler_{Rank_ID}.db" and msprof's "Profile
    Data File Reference (DB)", CANN 8.5/9.0): ``COMPUTE_TASK_INFO(name, globalTaskId,
    opType, ...)`` holds one row per compute task, ``name`` and ``opType`` being ids into
    ``STRING_IDS(id, value)``; ``TASK(startNs, endNs, globalTaskId, ...)`` holds its device
    start and end (ns, local Unix time). Rows are grouped by ``opType`` (an aclnn name
    resolved like a trace's, :func:`afbench.analysis.kernels.op_type_of`), ``count`` =
    tasks, ``total_us`` = summed ``endNs - startNs``; the names kept in ``kernel_names``.
    Communication tasks (``COMMUNICATION_TASK_INFO``) are not compute ops and are left out.

    Raises:
        ValueError: not an SQLite database, a table or column above missing, or a task
            whose start or end is not a whole number of ns.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            found = db.execute(_DB_QUERY).fetchall()
    except sqlite3.DatabaseError as exc:
        raise ValueError(
            f"{path}: not a torch_npu profiler database "
            f"(COMPUTE_TASK_INFO, TASK, STRING_IDS): {exc}"
        ) from None
    bad = next((name for _t, name, _n, _s, odd in found if odd), None)
    if bad is not None:
        raise ValueError(
            f"{path}: a TASK row of {bad!r} has a startNs/endNs that is not a whole number of ns"
        )
    names = ["<unknown>" if name is None else str(name) for _t, name, _n, _s, _o in found]
    return K.build_kernel_table(
        pd.DataFrame(
            {
                "op_type": [K.op_type_of(t, n) for (t, *_rest), n in zip(found, names)],
                "count": [n for _t, _name, n, _s, _o in found],
                "total_us": [ns_to_us(total) for _t, _name, _n, total, _o in found],
                K.KERNEL_NAMES: names,
            }
        )
    )


def _trace_view_kernels(path: Path) -> pd.DataFrame:
    """The trace's device kernels keyed by op type like the CSV tables
    (:func:`afbench.analysis.kernels.kernel_op_type`, with the Name -> Type pairs of a
    ``kernel_details.csv`` beside it), each kernel name kept in ``kernel_names``."""
    from afbench.analysis.traces import read_trace  # traces imports kernels: no cycle here

    by_name = read_trace(path, steps=False).kernels  # streamed: memory per op name
    known = K.kernel_types(path.parent)
    return K.build_kernel_table(
        pd.DataFrame(
            {
                "op_type": [K.kernel_op_type(n, known) for n in by_name["op_type"]],
                "count": by_name["count"],
                "total_us": by_name["total_us"],
                K.KERNEL_NAMES: by_name["op_type"],
            }
        )
    )


_TORCH_TRACE = re.compile(r"^rank\d+_trace\.json(?:\.gz)?$")


def _is_profiler_db(filename: str) -> bool:
    return filename.startswith(PROFILER_DB_PREFIX) and filename.endswith(PROFILER_DB_SUFFIX)


#: (how a file is recognised, its reader, its name in messages), in order of preference.
_FORMATS = (
    (lambda f: f == K.KERNEL_TABLE_FILENAME, K.read_kernel_table, K.KERNEL_TABLE_FILENAME),
    (lambda f: f == K.OP_STATISTIC_FILENAME, K.read_op_statistic, K.OP_STATISTIC_FILENAME),
    (lambda f: f == K.KERNEL_DETAILS_FILENAME, K.read_kernel_details, K.KERNEL_DETAILS_FILENAME),
    (_is_profiler_db, read_profiler_db, f"{PROFILER_DB_PREFIX}_*{PROFILER_DB_SUFFIX}"),
    (lambda f: f == K.TRACE_VIEW_FILENAME, _trace_view_kernels, K.TRACE_VIEW_FILENAME),
    # a torch.profiler chrome trace a command or torchtitan run wrote (its CUDA kernels)
    (
        lambda f: f == "trace.json" or _TORCH_TRACE.match(f) is not None,
        _trace_view_kernels,
        "trace.json or rank*_trace.json[.gz]",
    ),
)
#: The file names a profile folder's op table is read from, in order of preference.
OP_TABLE_FILES = tuple(shown for _m, _r, shown in _FORMATS)


@dataclass(frozen=True)
class OpTable:
    """What :func:`load_op_table` found in a profile folder.

    Attributes:
        table: the kernel table (:data:`afbench.analysis.kernels.KERNEL_COLUMNS`, and
            ``kernel_names`` where the format names kernels), or ``None``.
        files: the files it was read from (or the one that failed), sorted.
        problem: ``""`` with a table, else :data:`NO_SOURCE`, :data:`NO_KERNELS` or
            :data:`UNREADABLE`.
        detail: for :data:`UNREADABLE` the reader's message; for :data:`NO_SOURCE` the
            names of the files the folder holds, ``", "``-joined (``""`` for none).
    """

    table: pd.DataFrame | None
    files: tuple[Path, ...] = ()
    problem: str = ""
    detail: str = ""


def _files(root: Path) -> list[Path]:
    return sorted(Path(d) / f for d, _dirs, names in os.walk(root) for f in names)


def load_op_table(profile_dir: Path | str) -> OpTable:
    """The op table of ``profile_dir`` from its preferred format (module docstring), or why
    there is none. Never raises for a malformed file: it is :data:`UNREADABLE`, its message
    kept.
    """
    root = Path(profile_dir)
    present = _files(root) if root.is_dir() else []
    for matches, reader, _shown in _FORMATS:
        paths = [p for p in present if matches(p.name)]
        if not paths:
            continue
        try:
            tables = [reader(p) for p in paths]
        except (OSError, ValueError) as exc:
            return OpTable(None, tuple(paths), UNREADABLE, str(exc))
        table = (
            tables[0]
            if len(tables) == 1
            else K.build_kernel_table(pd.concat(tables, ignore_index=True))
        )
        if not len(table):
            return OpTable(None, tuple(paths), NO_KERNELS)
        return OpTable(table, tuple(paths))
    return OpTable(None, (), NO_SOURCE, ", ".join(sorted({p.name for p in present})))


def load_kernel_table(profile_dir: Path | str) -> pd.DataFrame | None:
    """The op table of ``profile_dir`` (:func:`load_op_table`), ``None`` where it has no file
    of any format or its file holds no kernels.

    Raises:
        ValueError: the chosen file is malformed (see the readers).
    """
    found = load_op_table(profile_dir)
    if found.problem == UNREADABLE:
        raise ValueError(found.detail)
    return found.table
