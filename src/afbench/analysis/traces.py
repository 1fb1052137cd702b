"""Kernel tables and per-step device time from trace files in the Chrome trace event format.

Two writers, one reader:

- **torch_npu** ``ASCEND_PROFILER_OUTPUT/trace_view.json``: a bare JSON array of events.
  ``ts`` is a *string* of absolute microseconds with a nanosecond fraction
  (``"1732873000000121.375"``, about 1.7e15, beyond float64's precision: Ascend/pytorch issue
  133), ``dur`` a number; device kernels are ``"ph": "X"`` events of the process whose
  ``process_name`` metadata is ``Ascend Hardware`` (other device tracks such as ``Overlap
  Analysis``, ``HCCL`` or ``AI Core Freq`` are not kernels); host->device flows are
  ``"ph": "s"`` / ``"ph": "f"`` pairs whose ``id`` is a huge integer (above 2**53).
- **torch.profiler** ``export_chrome_trace`` (``trace.json``, torchtitan's
  ``rank<r>_trace.json[.gz]``): an object with ``traceEvents``; numeric ``ts``; device work is
  ``cat`` ``kernel``, ``gpu_memcpy``, ``gpu_memset``; flows ``cat`` ``ac2g``. Every profiled
  step appears twice, as a CPU ``user_annotation`` and a GPU ``gpu_user_annotation`` span
  named ``ProfilerStep#N``: it is one step.

Numbers are read exactly (``ts`` as integer nanoseconds). A step's label number ``N`` is not
its training step: PyTorch's counter has started one off (PyTorch issues 121126, 148314), so
training steps come from the profiler schedule (:func:`training_steps_of`).
"""

from __future__ import annotations

import gzip
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from afbench.analysis.kernels import build_kernel_table
from afbench.analysis.reading import check_reading
from afbench.analysis.timestamps import ns_to_us, us_to_ns

#: Columns of :attr:`TraceSummary.steps`.
TRACE_STEP_COLUMNS = [
    "profiler_step",
    "training_step",
    "host_span_us",
    "device_span_us",
    "kernels",
    "kernel_us",
]

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_NPU_KERNEL_PROCESS = "Ascend Hardware"


@dataclass
class TraceSummary:
    """What one trace file says about kernels and steps.

    Attributes:
        kernels: kernel table (:data:`afbench.analysis.kernels.KERNEL_COLUMNS`: op_type =
            kernel name, count, total_us, ratio_pct) over every device event of the trace.
        steps: one row per profiled step in time order, columns :data:`TRACE_STEP_COLUMNS`:
            ``profiler_step`` (int, the ``N`` of ``ProfilerStep#N``), ``training_step`` (the
            1-based training step from the schedule, or ``None`` without one),
            ``host_span_us`` (the CPU step span), ``device_span_us`` (the GPU step span
            when the trace has one, else first to last device event of the step; ``None``
            when the step ran no device work), ``kernels`` (device events of the step) and
            ``kernel_us`` (their summed duration).
        source: the file read.
    """

    kernels: pd.DataFrame
    steps: pd.DataFrame
    source: Path


@dataclass
class _Span:
    name: str
    start: int  # ns
    end: int  # ns
    pid: Any
    tid: Any
    cat: str


#: A trace is read up to this many bytes (inflated, for ``.gz``); a bigger one is refused
#: naming the file. torch_npu's trace_view.json of a few profiled steps is tens to hundreds
#: of MB.
TRACE_MAX_BYTES = 2 << 30
#: A ``.gz`` trace inflates to at most this many times its size (JSON traces deflate 5-20x;
#: a 6 MiB gzip "bomb" of one repeated byte inflates 1000x, to 6 GiB), and never less than
#: :data:`GZIP_MIN_CAP` bytes.
GZIP_MAX_RATIO = 100
GZIP_MIN_CAP = 64 << 20
#: bytes ijson reads at a time: a string token spanning many reads is lexed again from its
#: start at each one (64 KiB: a 16 MiB name took 3.2 s, 4 MiB reads: 0.3 s)
_READ = 4 << 20
#: the keys of an event :func:`summarise_trace` reads; the rest (``args`` of kernels, call
#: stacks) is dropped as the file is read
_EVENT_KEYS = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "id")
_EVENT_PHASES = {"X", "s", "f", "M"}
#: columns of the rows :class:`_Streamed` keeps per device event, flow start and flow end
_DEV, _FLOW_S, _FLOW_F = ["thread", "devcat", "start", "end"], ["id", "ts"], ["id", "thread", "ts"]


class _Capped:
    """A binary file object that raises ValueError once more than ``cap`` bytes were read."""

    def __init__(self, fh: Any, cap: int, path: Path) -> None:
        self.fh, self.path, self.n = fh, path, 0
        self.gz = path.suffix == ".gz"
        self.cap = (
            min(cap, max(GZIP_MIN_CAP, GZIP_MAX_RATIO * path.stat().st_size)) if self.gz else cap
        )

    def read(self, size: int = -1) -> bytes:
        check_reading(self.path)  # afbench's reading bounds (a stop, collect_timeout_s)
        data = self.fh.read(1 << 16 if size is None or size < 0 else size)
        self.n += len(data)
        if self.n > self.cap:
            raise ValueError(
                f"{self.path}: over {self.cap / 2**20:g} MiB "
                + (
                    f"inflated (analysis.traces: at most {GZIP_MAX_RATIO}x its size, "
                    f"{TRACE_MAX_BYTES >> 30} GiB)"
                    if self.gz
                    else "(analysis.traces.TRACE_MAX_BYTES)"
                )
                + ": not read"
            )
        return data


@contextmanager
def _open(path: Path, cap: int = TRACE_MAX_BYTES) -> Iterator[_Capped]:
    """``path`` (inflated when ``.gz``) as a binary file object that refuses to read past
    its cap (:class:`_Capped`)."""
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as raw:
        yield _Capped(raw, cap, path)


def iter_trace_events(path: Path | str, cap: int = TRACE_MAX_BYTES) -> Iterator[dict[str, Any]]:
    """The complete, flow and metadata events (``ph`` ``X``, ``s``, ``f``, ``M``) of a
    Chrome-format trace, one at a time, as ijson builds them: a JSON array (torch_npu) or an
    object with ``traceEvents`` (torch.profiler), optionally gzip-compressed (``.gz``). Memory
    holds one event and one read buffer (:data:`_READ`), never the file's text or the events
    already yielded. Floats are :class:`decimal.Decimal`, so no timestamp is rounded.

    Raises:
        ValueError: not JSON, neither an array nor an object with a ``traceEvents`` list, or
            over ``cap`` bytes (a ``.gz`` inflated: over :data:`GZIP_MAX_RATIO` times its
            size, at least :data:`GZIP_MIN_CAP`).
        OSError: the file cannot be opened.
    """
    import ijson  # only where a trace is read

    path = Path(path)
    try:
        with _open(path, cap) as fh:
            head = fh.read(_READ)
            first = head.lstrip()[:1]
            if first not in (b"[", b"{"):
                raise ValueError(f"{path}: not a JSON trace: it starts with {first!r}")
            prefix = "item" if first == b"[" else "traceEvents.item"
            found = False
            for event in ijson.items(_Chain(head, fh), prefix, use_float=False, buf_size=_READ):
                found = True
                if isinstance(event, dict) and event.get("ph") in _EVENT_PHASES:
                    yield event
            if not found and first == b"{" and not _has_key(path, cap):
                raise ValueError(
                    f"{path}: expected a JSON array of events or an object with 'traceEvents'"
                )
    except (ijson.JSONError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: not a JSON trace: {exc}") from exc


def read_trace_events(path: Path | str, cap: int = TRACE_MAX_BYTES) -> list[dict[str, Any]]:
    """:func:`iter_trace_events` as a list, each event cut to :data:`_EVENT_KEYS` (and a
    metadata event's ``args`` to its ``name``). For small traces and tests: memory grows with
    the events; :func:`read_trace` streams instead.

    Raises:
        ValueError, OSError: see :func:`iter_trace_events`.
    """
    events = []
    for event in iter_trace_events(path, cap):
        slim = {k: event[k] for k in _EVENT_KEYS if k in event}
        if event["ph"] == "M" and isinstance(event.get("args"), dict):
            slim["args"] = {"name": event["args"].get("name")}
        events.append(slim)
    return events


class _Chain:
    """``head`` then the rest of ``fh``, as one binary file object for ijson."""

    def __init__(self, head: bytes, fh: _Capped) -> None:
        self.head, self.fh = head, fh

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson's probe of bytes or text
            return b""
        if self.head:
            data, self.head = self.head, b""
            return data
        return self.fh.read(size)


def _has_key(path: Path, cap: int) -> bool:
    """Whether the object at the top of the trace has a ``traceEvents`` list."""
    import ijson

    with _open(path, cap) as fh:
        return any(
            prefix == "traceEvents" and event == "start_array"
            for prefix, event, _ in ijson.parse(fh, buf_size=_READ)
        )


def _span(event: Mapping[str, Any], source: Path) -> _Span:
    try:
        start = us_to_ns(event["ts"])
        end = start + us_to_ns(event.get("dur", 0))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{source}: event {event.get('name')!r}: bad ts/dur: {exc}") from None
    return _Span(
        str(event.get("name", "")),
        start,
        end,
        event.get("pid"),
        event.get("tid"),
        str(event.get("cat", "")),
    )


class _Streamed:
    """What :func:`summarise_trace` keeps of a trace while its events stream past.

    Kernels are summed per ``(pid, cat, name)`` as they come (a few hundred op names, whatever
    the trace's length); a process is known to be a device only once its ``process_name``
    metadata event was read, so the events of a process not yet named are kept too and
    sorted out at the end. For the per-step table (``steps``), each device event and each flow
    leaves 8-byte integers in typed arrays (about 40 bytes per kernel with its flow, against
    about 900 bytes as a dict of Decimals), joined with pandas at the end.
    """

    def __init__(self, source: Path, steps: bool) -> None:
        self.source, self.steps = source, steps
        self.device_pids: set[Any] = set()
        self.named_pids: set[Any] = set()  # every process with a process_name event
        self.step_spans: list[tuple[int, _Span]] = []
        self.ops: dict[tuple[Any, str, str], list[int]] = {}  # -> [count, total ns]
        self.threads: dict[tuple[Any, Any], int] = {}  # (pid, tid) -> index
        self.odd_ids: dict[Any, int] = {}  # flow ids that are not int64s
        # rows of int64s, flattened: _DEV, _FLOW_S and _FLOW_F name their columns
        self.dev, self.flow_s, self.flow_f = array("q"), array("q"), array("q")

    def _flow_id(self, fid: Any) -> int:
        if type(fid) is int and -(2**62) <= fid < 2**63:
            return fid
        return -(2**63) + self.odd_ids.setdefault(fid, len(self.odd_ids))

    def _thread(self, event: Mapping[str, Any]) -> int:
        return self.threads.setdefault((event.get("pid"), event.get("tid")), len(self.threads))

    def add(self, e: Mapping[str, Any]) -> None:
        ph = e.get("ph")
        if ph == "X":
            name = str(e.get("name", ""))
            label = _STEP_NAME.match(name) if name.startswith("ProfilerStep#") else None
            if label:
                self.step_spans.append((int(label.group(1)), _span(e, self.source)))
                return
            pid, cat = e.get("pid"), str(e.get("cat", ""))
            devcat = cat in _DEVICE_CATS
            if not devcat and pid in self.named_pids and pid not in self.device_pids:
                return  # a host event
            span = _span(e, self.source)
            op = self.ops.setdefault((pid, cat if devcat else "", name), [0, 0])
            op[0] += 1
            op[1] += span.end - span.start
            if self.steps:
                self.dev.extend((self._thread(e), devcat, span.start, span.end))
        elif ph in ("s", "f") and "id" in e and "ts" in e and self.steps:
            fid, ts = self._flow_id(e["id"]), us_to_ns(e["ts"])
            if ph == "s":
                self.flow_s.extend((fid, ts))
            else:
                self.flow_f.extend((fid, self._thread(e), ts))
        elif ph == "M" and e.get("name") == "process_name":
            self.named_pids.add(e.get("pid"))
            args = e.get("args")
            if isinstance(args, dict) and args.get("name") == _NPU_KERNEL_PROCESS:
                self.device_pids.add(e.get("pid"))

    def kernels(self) -> pd.DataFrame:
        rows = [
            (name, count, ns_to_us(ns))
            for (pid, cat, name), (count, ns) in self.ops.items()
            if cat or pid in self.device_pids
        ]
        return build_kernel_table(pd.DataFrame(rows, columns=["op_type", "count", "total_us"]))

    def device_events(self) -> pd.DataFrame:
        """Device events: ``start``, ``end`` (ns) and ``launch`` (ns: the start of the flow
        that ends at the event's start on its thread, else the event's own start)."""
        on_device = np.array(
            [pid in self.device_pids for pid, _tid in self.threads] or [False], dtype=bool
        )
        dev, starts, ends = (
            pd.DataFrame(np.frombuffer(rows, np.int64).reshape(-1, len(columns)), columns=columns)
            for rows, columns in ((self.dev, _DEV), (self.flow_s, _FLOW_S), (self.flow_f, _FLOW_F))
        )
        dev = dev[(dev["devcat"] != 0) | on_device[dev["thread"].to_numpy()]]
        launch = (
            ends.merge(starts.drop_duplicates("id", keep="last"), on="id", suffixes=("", "_s"))
            .drop_duplicates(["thread", "ts"], keep="last")
            .rename(columns={"ts": "start", "ts_s": "launch"})[["thread", "start", "launch"]]
        )
        dev = dev.merge(launch, on=["thread", "start"], how="left")
        dev["launch"] = dev["launch"].astype("Int64").fillna(dev["start"]).astype("int64")
        return dev


def summarise_trace(
    events: Iterable[Mapping[str, Any]],
    *,
    schedule: Mapping[str, int] | None = None,
    source: Path | str = "trace",
    steps: bool = True,
) -> TraceSummary:
    """Kernel table and per-step device time of the events of one trace, read in one pass.

    A device event belongs to the step whose GPU ``ProfilerStep#N`` span holds its start;
    without GPU step spans (torch_npu), to the step whose host span holds its launch (the
    start of its flow), else its own start.

    Args:
        events: as :func:`iter_trace_events` yields them (or a list of them).
        schedule: the profiler schedule (``wait``, ``warmup``, ``active``, optional
            ``repeat`` and ``skip_first``) to number training steps; ``None`` leaves
            ``training_step`` empty.
        source: file name used in messages.
        steps: ``False`` leaves :attr:`TraceSummary.steps` empty and keeps memory to the
            kernel table's size (:class:`_Streamed`).

    Raises:
        ValueError: an event has a bad ``ts``/``dur``, a host step label appears twice, or
            the trace holds more steps than the schedule's active steps.
    """
    source = Path(source)
    kept = _Streamed(source, steps)
    try:
        for event in events:
            kept.add(event)
    except OverflowError as exc:  # a timestamp past int64 nanoseconds (year 2262)
        raise ValueError(f"{source}: a ts/dur out of range: {exc}") from None
    kernels = kept.kernels()
    if not steps:
        return TraceSummary(kernels, pd.DataFrame([], columns=TRACE_STEP_COLUMNS), source)
    host_steps: dict[int, _Span] = {}
    device_steps: dict[int, _Span] = {}
    for n, span in kept.step_spans:
        if span.cat == "gpu_user_annotation":
            device_steps[n] = span
        elif span.pid not in kept.device_pids:
            if n in host_steps:
                raise ValueError(f"{source}: {span.name} appears twice on the host")
            host_steps[n] = span
    labels = sorted(host_steps, key=lambda n: host_steps[n].start)
    dev = kept.device_events()
    start, end, launch = (dev[k].to_numpy() for k in ("start", "end", "launch"))
    owner = np.full(len(dev), -1)
    for at, spans in ((start, device_steps), (launch, host_steps)):
        for i, n in enumerate(labels):
            if n in spans:
                owner[(owner < 0) & (spans[n].start <= at) & (at < spans[n].end)] = i

    training = training_steps_of(len(labels), schedule, source=source) if schedule else None
    rows = []
    for i, n in enumerate(labels):
        mine = owner == i
        if n in device_steps:
            dev_span: float | None = ns_to_us(device_steps[n].end - device_steps[n].start)
        elif mine.any():
            dev_span = ns_to_us(int(end[mine].max()) - int(start[mine].min()))
        else:
            dev_span = None
        rows.append(
            {
                "profiler_step": n,
                "training_step": training[i] if training else None,
                "host_span_us": ns_to_us(host_steps[n].end - host_steps[n].start),
                "device_span_us": dev_span,
                "kernels": int(mine.sum()),
                "kernel_us": ns_to_us(int((end[mine] - start[mine]).sum())),
            }
        )
    return TraceSummary(kernels, pd.DataFrame(rows, columns=TRACE_STEP_COLUMNS), source)


def read_trace(
    path: Path | str, schedule: Mapping[str, int] | None = None, *, steps: bool = True
) -> TraceSummary:
    """:func:`summarise_trace` of a torch_npu ``trace_view.json`` or a torch.profiler chrome
    trace (``trace.json``, ``rank<r>_trace.json.gz``), streamed: the file is parsed once and
    no event is kept whole (``bench/hostile_sizes.py``: a 300 MiB ``trace_view.json``).

    Raises:
        ValueError, OSError: see :func:`iter_trace_events` and :func:`summarise_trace`.
    """
    path = Path(path)
    return summarise_trace(iter_trace_events(path), schedule=schedule, source=path, steps=steps)


def training_steps_of(
    n_recorded: int, schedule: Mapping[str, int], *, source: Path | str = "trace"
) -> list[int]:
    """Training step (1-based) of each of ``n_recorded`` profiled steps, in time order.

    ``torch.profiler.schedule(skip_first, wait, warmup, active, repeat)`` records the steps
    whose 0-based counter is ``skip_first + c * (wait + warmup + active) + wait + warmup + i``
    (cycle ``c``, ``i < active``); ``prof.step()`` follows each training step, so training
    step = counter + 1 (afbench's profiler and torch_npu's schedule alike).

    Raises:
        ValueError: ``active < 1``, or more recorded steps than the schedule records.
    """
    skip = int(schedule.get("skip_first", 0))
    wait, warmup, active = (int(schedule.get(k, 0)) for k in ("wait", "warmup", "active"))
    repeat = int(schedule.get("repeat", 0))
    if active < 1:
        raise ValueError(f"profiler schedule {dict(schedule)} has no active step")
    cycle = wait + warmup + active
    capacity = repeat * active if repeat > 0 else None
    if capacity is not None and n_recorded > capacity:
        raise ValueError(
            f"{source}: {n_recorded} profiled steps, but schedule {dict(schedule)} records "
            f"{capacity}"
        )
    return [
        skip + (i // active) * cycle + wait + warmup + (i % active) + 1 for i in range(n_recorded)
    ]


def label_stretches(labels: Sequence[int]) -> list[tuple[int, int]]:
    """The ``ProfilerStep#N`` labels as stretches of consecutive numbers, ``(first, last)``
    each, in order: one stretch per active period of a ``torch.profiler.schedule`` cycle
    (``schedule(wait=1, warmup=2, active=3, repeat=2)`` records #3-#5 and #9-#11). With
    ``prof.step()`` after every training step, label ``N`` is training step ``N + 1``
    whatever the schedule (:func:`training_steps_of`)."""
    out: list[tuple[int, int]] = []
    for n in sorted(set(labels)):
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


#: Chrome traces a profile folder may hold: afbench's own torch.profiler export, torchtitan's
#: per-rank traces, torch_npu's ``trace_view.json``.
TRACE_FILENAMES = ("trace.json", "rank*_trace.json", "rank*_trace.json.gz", "trace_view.json")
_LABEL_IN_TEXT = re.compile(r'"name"\s*:\s*"ProfilerStep#(\d+)"')


def find_trace(profile_dir: Path | str) -> Path | None:
    """The first Chrome trace below ``profile_dir`` (:data:`TRACE_FILENAMES`, searched
    recursively, sorted), or ``None``."""
    root = Path(profile_dir)
    if not root.is_dir():
        return None
    for pattern in TRACE_FILENAMES:
        found = sorted(root.rglob(pattern))
        if found:
            return found[0]
    return None


def profiler_step_labels(path: Path | str) -> list[int]:
    """The ``N`` of every ``ProfilerStep#N`` span of a trace, sorted, each once (a CUDA trace
    has a host and a device span per step). A text scan, not a JSON parse: a 10 MB trace
    answers in milliseconds.

    The label is torch.profiler's own step counter (``prof.step()`` calls so far, from 0), not
    the training step: with ``schedule(wait=1, warmup=2, active=3)`` and ``prof.step()`` after
    every training step, training steps 4-6 are recorded as ``ProfilerStep#3``-``#5``
    (:func:`training_steps_of` gives the training steps).

    Raises:
        OSError: the file cannot be read; ValueError: a ``.gz`` file is not gzip.
    """
    path = Path(path)
    labels: set[int] = set()
    tail = ""
    try:
        with _open(path) as fh:
            while chunk := fh.read(1 << 20):  # 1 MiB at a time; a label may span two
                text = tail + chunk.decode("utf-8", errors="replace")
                labels.update(int(n) for n in _LABEL_IN_TEXT.findall(text))
                tail = text[-64:]
    except gzip.BadGzipFile as exc:
        raise ValueError(f"{path}: not gzip: {exc}") from exc
    return sorted(labels)
