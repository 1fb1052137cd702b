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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from afbench.analysis.kernels import build_kernel_table
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


class _Capped:
    """A binary file object that raises ValueError once more than ``cap`` bytes were read."""

    def __init__(self, fh: Any, cap: int, path: Path) -> None:
        self.fh, self.path, self.n = fh, path, 0
        self.gz = path.suffix == ".gz"
        self.cap = (
            min(cap, max(GZIP_MIN_CAP, GZIP_MAX_RATIO * path.stat().st_size)) if self.gz else cap
        )

    def read(self, size: int = -1) -> bytes:
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


def read_trace_events(path: Path | str, cap: int = TRACE_MAX_BYTES) -> list[dict[str, Any]]:
    """The events of a Chrome-format trace: a JSON array (torch_npu) or an object with
    ``traceEvents`` (torch.profiler), optionally gzip-compressed (``.gz``). Read
    incrementally (ijson): memory holds the events :func:`summarise_trace` reads (complete,
    flow and metadata events, their :data:`_EVENT_KEYS` and a metadata event's ``args``),
    never the file's text. Floats are read as :class:`decimal.Decimal`, so no timestamp is
    rounded.

    Raises:
        ValueError: not JSON, neither an array nor an object with a ``traceEvents`` list, or
            over ``cap`` bytes (a ``.gz`` inflated: over :data:`GZIP_MAX_RATIO` times its
            size, at least :data:`GZIP_MIN_CAP`).
        OSError: the file cannot be opened.
    """
    import ijson  # only where a trace is read

    path = Path(path)
    events: list[dict[str, Any]] = []
    try:
        with _open(path, cap) as fh:
            head = fh.read(_READ)
            first = head.lstrip()[:1]
            if first not in (b"[", b"{"):
                raise ValueError(f"{path}: not a JSON trace: it starts with {first!r}")
            prefix = "item" if first == b"[" else "traceEvents.item"
            stream = _Chain(head, fh)
            found = False
            for event in ijson.items(stream, prefix, use_float=False, buf_size=_READ):
                found = True
                if isinstance(event, dict) and event.get("ph") in _EVENT_PHASES:
                    slim = {k: event[k] for k in _EVENT_KEYS if k in event}
                    if event["ph"] == "M" and isinstance(event.get("args"), dict):
                        slim["args"] = {"name": event["args"].get("name")}
                    events.append(slim)
            if not found and first == b"{" and not _has_key(path, cap):
                raise ValueError(
                    f"{path}: expected a JSON array of events or an object with 'traceEvents'"
                )
    except (ijson.JSONError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: not a JSON trace: {exc}") from exc
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


def summarise_trace(
    events: Sequence[Mapping[str, Any]],
    *,
    schedule: Mapping[str, int] | None = None,
    source: Path | str = "trace",
) -> TraceSummary:
    """Kernel table and per-step device time of the events of one trace.

    A device event belongs to the step whose GPU ``ProfilerStep#N`` span holds its start;
    without GPU step spans (torch_npu), to the step whose host span holds its launch (the
    start of its flow), else its own start.

    Args:
        events: as returned by :func:`read_trace_events`.
        schedule: the profiler schedule (``wait``, ``warmup``, ``active``, optional
            ``repeat`` and ``skip_first``) to number training steps; ``None`` leaves
            ``training_step`` empty.
        source: file name used in messages.

    Raises:
        ValueError: an event has a bad ``ts``/``dur``, a host step label appears twice, or
            the trace holds more steps than the schedule's active steps.
    """
    source = Path(source)
    device_pids = {
        e.get("pid")
        for e in events
        if e.get("ph") == "M"
        and e.get("name") == "process_name"
        and isinstance(e.get("args"), dict)
        and e["args"].get("name") == _NPU_KERNEL_PROCESS
    }
    host_steps: dict[int, _Span] = {}
    device_steps: dict[int, _Span] = {}
    device: list[_Span] = []
    flow_starts: dict[Any, int] = {}
    flow_ends: list[tuple[Any, Any, Any, int]] = []
    for e in events:
        ph = e.get("ph")
        if ph in ("s", "f") and "id" in e and "ts" in e:
            ts = us_to_ns(e["ts"])
            if ph == "s":
                flow_starts[e["id"]] = ts
            else:
                flow_ends.append((e["id"], e.get("pid"), e.get("tid"), ts))
            continue
        if ph != "X":
            continue
        name = str(e.get("name", ""))
        label = _STEP_NAME.match(name)
        if label:
            span = _span(e, source)
            if span.cat == "gpu_user_annotation":
                device_steps[int(label.group(1))] = span
            elif e.get("pid") not in device_pids:
                n = int(label.group(1))
                if n in host_steps:
                    raise ValueError(f"{source}: {name} appears twice on the host")
                host_steps[n] = span
            continue
        if e.get("cat") in _DEVICE_CATS or e.get("pid") in device_pids:
            device.append(_span(e, source))

    launch = {
        (pid, tid, ts): flow_starts[fid] for fid, pid, tid, ts in flow_ends if fid in flow_starts
    }
    labels = sorted(host_steps, key=lambda n: host_steps[n].start)
    per_step: dict[int, list[_Span]] = {n: [] for n in labels}
    for ev in device:
        owner = next(
            (
                n
                for n in labels
                if n in device_steps and device_steps[n].start <= ev.start < device_steps[n].end
            ),
            None,
        )
        if owner is None:
            at = launch.get((ev.pid, ev.tid, ev.start), ev.start)
            owner = next((n for n in labels if host_steps[n].start <= at < host_steps[n].end), None)
        if owner is not None:
            per_step[owner].append(ev)

    training = training_steps_of(len(labels), schedule, source=source) if schedule else None
    rows = []
    for i, n in enumerate(labels):
        evs = per_step[n]
        if n in device_steps:
            dev_span: float | None = ns_to_us(device_steps[n].end - device_steps[n].start)
        elif evs:
            dev_span = ns_to_us(max(e.end for e in evs) - min(e.start for e in evs))
        else:
            dev_span = None
        rows.append(
            {
                "profiler_step": n,
                "training_step": training[i] if training else None,
                "host_span_us": ns_to_us(host_steps[n].end - host_steps[n].start),
                "device_span_us": dev_span,
                "kernels": len(evs),
                "kernel_us": ns_to_us(sum(e.end - e.start for e in evs)),
            }
        )
    kernels = build_kernel_table(
        pd.DataFrame(
            {
                "op_type": [e.name for e in device],
                "count": [1] * len(device),
                "total_us": [ns_to_us(e.end - e.start) for e in device],
            }
        )
    )
    return TraceSummary(kernels, pd.DataFrame(rows, columns=TRACE_STEP_COLUMNS), source)


def read_trace(path: Path | str, schedule: Mapping[str, int] | None = None) -> TraceSummary:
    """:func:`summarise_trace` of a torch_npu ``trace_view.json`` or a torch.profiler chrome
    trace (``trace.json``, ``rank<r>_trace.json.gz``).

    Raises:
        ValueError, OSError: see :func:`read_trace_events` and :func:`summarise_trace`.
    """
    path = Path(path)
    return summarise_trace(read_trace_events(path), schedule=schedule, source=path)


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
