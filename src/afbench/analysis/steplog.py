"""Strict step-time parsing of training logs (the "training verdict" input).

Source format: the per-step lines of torchtitan / torchtitan-npu, e.g.::

    step:  7  loss:  2.31000  elapsed_time_per_step: 0.281s  tokens_per_s: 3650

possibly wrapped in ANSI colour codes and prefixed by a logger header. The rule is the one
users apply by hand: strip ANSI escapes, match each line, and require every step of the
measured window (training steps 6..10 by default) exactly once with a finite, positive time.
Steps outside the window are ignored, even when duplicated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from afbench.analysis.errors import InvalidLog
from afbench.analysis.reading import check_reading

#: Default measured window of the AF OFF/ON comparison: training steps 6..10 (1-based,
#: inclusive); steps 1..5 are warm-up and compilation.
VERDICT_FIRST_STEP = 6
VERDICT_LAST_STEP = 10

#: Lines that are never step lines, whatever they contain, each rule with the reason an
#: error gives when it hides a line that reads like a step line:
#:
#: - PyTorch's own glog-style records: the header (``W1201 12:00:00.123456 4242
#:   torch/_dynamo/convert_frame.py:964] ...``, possibly behind a torchrun ``[rankN]:``
#:   prefix) names a file under ``torch/`` (dynamo's recompile warnings, PyTorch issue
#:   150859). A glog/absl header naming the training script's own file (``I1203
#:   09:00:00.123456 12345 train.py:88] step: 6 ...``, absl logging) is a step line;
#: - a line that starts (after an optional rank prefix) with a dynamo compile id ``[0/8]``
#:   (``[frame/recompile]``, ``[0/8_1]``), the tag of TORCH_LOGS records whose header was
#:   cut. A counter later on the line (``Epoch [1/3] step: 6 ...``, Megatron/MindSpeed and
#:   many PyTorch scripts) is no compile id;
#: - tqdm bars (``60%|██████``) and anything naming ``torch._dynamo``.
_NOT_A_STEP_RULES = (
    (
        r"^(?:\[[^\]]*\]:)?\s*[IWEFV]\d{4}\s+[\d:.]+\s+\d+\s+(?:\S*/)?torch/[^\s\]]*:\d+\]",
        "it is a glog record of a PyTorch file (torch/...), e.g. a dynamo recompile warning",
    ),
    (
        r"^(?:\[[^\]]*\]:)?\s*\[\s*\d+\s*/\s*\d+(?:_\d+)?\s*\]",
        "it starts with a dynamo compile id ([frame/recompile], e.g. [0/8])",
    ),
    (r"\d%\|", "it holds a tqdm progress bar (N%|)"),
    (r"torch\._dynamo", "it names torch._dynamo"),
)
NOT_A_STEP_LINE = "|".join(rule for rule, _ in _NOT_A_STEP_RULES)
_NOT_A_STEP_RES = tuple((re.compile(rule), why) for rule, why in _NOT_A_STEP_RULES)

#: The step line itself, without the exclusions (see :data:`DEFAULT_STEP_PATTERN`).
_STEP_BODY = (
    r"\bstep:\s*(?P<step>\d+)(?=\s|$)(?:.*?\bloss:\s*(?P<loss>\S+))?"
    r".*?\belapsed_time_per_step:\s*(?P<value>\S+?)s?(?=\s|$)"
)
_STEP_BODY_RE = re.compile(_STEP_BODY)

#: Matches ``step: N`` (N an integer token: ``step: 6.5``, ``step: 6/10`` and ``step=7`` are
#: not steps) then, anywhere later on the line, ``elapsed_time_per_step: X``; a line matching
#: :data:`NOT_A_STEP_LINE` never matches. ``value`` takes the whole token after the key
#: (minus an optional trailing ``s``) so that a malformed value such as ``nan`` or ``n/a`` is
#: reported rather than silently skipped. ``\bstep`` does not match inside
#: ``elapsed_time_per_step`` (``_`` is a word character).
DEFAULT_STEP_PATTERN = rf"^(?!.*(?:{NOT_A_STEP_LINE})).*?" + _STEP_BODY


def excluded_step_line(line: str) -> tuple[int, str] | None:
    """``(step, reason)`` when ``line`` reads like a default-pattern step line but a rule of
    :data:`NOT_A_STEP_LINE` keeps it out (the reason names the rule); None otherwise."""
    body = _STEP_BODY_RE.search(line)
    if body is None:
        return None
    for rule, why in _NOT_A_STEP_RES:
        if rule.search(line):
            return int(body.group("step")), why
    return None


# CSI (colours, cursor moves), OSC (titles, hyperlinks), charset selection (``tput sgr0``
# emits ESC ( B) and two-byte escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[()*+][0-9A-Za-z]"
    r"|\x1b[@-Z\\-_]"
)


def strip_ansi(text: str) -> str:
    """Return ``text`` without ANSI escape sequences (SGR colours, cursor control, OSC)."""
    return _ANSI_RE.sub("", text)


#: A progress bar at the start of a line segment, with what belongs to it: an optional
#: description (``Training: ``, never holding ``step``), then the bar
#:
#: - tqdm's ``{l_bar}{bar}|``: ``60%|██████    |`` (``ascii=True``: ``60%|######    |``), or a
#:   hand-made bar in brackets: ``[######    ]``, ``[=====>    ]``;
#: - its count ``6/10`` (required after a hand-made bar, which is otherwise any bracket);
#: - tqdm's ``[elapsed<remaining, rate, postfix]`` part, with or without a rate
#:   (``[00:01<00:00, 1.2it/s, loss=2.31, step=6]``, ``[00:01<00:00]``);
#: - a postfix of ``name=number`` pairs outside brackets (a ``bar_format`` ending in
#:   ``{postfix}``: ``, loss=2.31, step=6``);
#:
#: or tqdm's bar without a total, ``Training: 6it [00:01, 1.2it/s, step=6]``. Elapsed is
#: ``MM:SS`` or ``H:MM:SS``; a count may be unit-scaled (``1.20k/10.0k``) or ``?``.
_BAR_DESC = r"(?:(?!\bstep\b)[^|\n])*?"
_BAR_NUM = r"(?:\d+(?:\.\d+)?[kMGTPEZY]?|\?)"
_BAR_COUNT = rf"\s*{_BAR_NUM}/{_BAR_NUM}"
_BAR_TIMES = r"\s*\[\d+:\d{2}(?::\d{2})?(?:[<,][^\]]*)?\]"
_BAR_POSTFIX = r"(?:\s*,?\s*[A-Za-z_]\w*=[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)*"
_BAR_RE = re.compile(
    rf"^{_BAR_DESC}(?:"
    rf"\d+%\|[^|]*\|(?:{_BAR_COUNT})?(?:{_BAR_TIMES})?"
    rf"|\[[#=>\-.*\s\u2580-\u259f]*\]{_BAR_COUNT}(?:{_BAR_TIMES})?"
    rf"|\d+(?:\.\d+)?[kMGTPEZY]?[A-Za-z]+{_BAR_TIMES}"
    rf"){_BAR_POSTFIX}\s*"
)


def log_lines(text: str | Iterable[str]) -> Iterator[tuple[int, str]]:
    """The lines of a log as a terminal shows them, each with its 1-based physical line
    number (counted by newlines, as an editor counts them).

    ANSI escapes are stripped; a carriage return starts a new segment of the same line
    (tqdm redraws its bar with ``\\r``, so a redirected log holds every redraw on one
    line); a progress bar at the start of a segment (tqdm's, with or without its rate part,
    or a hand-made ``[#####     ] 4/10``: :data:`_BAR_RE`) is cut off with its count and
    postfix, and the text after it kept. The
    shape this reads (tqdm writing to a file, with the training loop's ``print`` between its
    redraws)::

        \\rTraining:  20%|██        | 2/10 [00:01<00:04, 1.2it/s, loss=2.48, step=2]step:  3  loss: ...\\n

    gives ``step:  3  loss: ...`` once: the metrics line is kept, the bar's own
    ``loss=``/``step=`` postfix is never read. Empty segments are left out.

    ``text`` is the whole log, or its physical lines one by one (:func:`iter_log`: a log read
    streaming).
    """
    if isinstance(text, str):
        physical: Iterable[str] = strip_ansi(text).replace("\r\n", "\n").split("\n")
    else:
        physical = (strip_ansi(line.removesuffix("\n").removesuffix("\r")) for line in text)
    for lineno, line in enumerate(physical, start=1):
        for segment in line.split("\r"):
            if "|" in segment or "[" in segment:  # every bar has one (a MiB line: 0.2 s)
                segment = _BAR_RE.sub("", segment, count=1)
            if segment.strip():
                yield lineno, segment


#: A log line longer than this (bytes) is named, not loaded (:func:`iter_log`); a tqdm bar
#: redrawn with ``\r`` for an hour at 10 redraws/s is about 4 MB.
LOG_LINE_CAP = 8 << 20


def iter_log(path: Path | str, cap: int = LOG_LINE_CAP) -> Iterator[str]:
    """A log file's physical lines, read streaming, each with its newline (UTF-8, undecodable
    bytes replaced, carriage returns kept for :func:`log_lines`). A line over ``cap`` bytes is
    read through in 1 MiB pieces and stands as one line naming it: ``[afbench: line 3 of
    <path> holds 1073741825 bytes, over the 8 MiB line cap: not read]``.

    Every line (and every MiB of a long one) is read within afbench's reading bounds
    (:func:`afbench.analysis.reading.check_reading`: ``launcher.collect_timeout_s``, a stop).

    Raises:
        OSError: the file cannot be read.
        LogNotRead: the reading budget is spent or reading was stopped (names the file).
    """
    with open(path, "rb") as fh:
        lineno = 0
        while True:
            check_reading(path)
            if not (raw := fh.readline(cap + 1)):
                break
            lineno += 1
            if len(raw) <= cap or raw.endswith(b"\n"):
                yield raw.decode("utf-8", errors="replace")
                continue
            size = len(raw)
            while not raw.endswith(b"\n"):
                check_reading(path)
                if not (raw := fh.readline(1 << 20)):
                    break
                size += len(raw)
            yield (
                f"[afbench: line {lineno} of {path} holds {size} bytes, over the "
                f"{cap / 2**20:g} MiB line cap: not read]\n"
            )


def read_log(path: Path | str, cap: int = LOG_LINE_CAP) -> str:
    """A log file's text with its carriage returns kept, for :func:`log_lines` (Python's
    default newline translation would turn each tqdm redraw into a line of its own and shift
    every line number); UTF-8, a line over ``cap`` bytes named (:func:`iter_log`).

    Raises:
        OSError: the file cannot be read.
    """
    return "".join(iter_log(path, cap))


def step_line(step: int, loss: float, step_time_s: float, **fields: float) -> str:
    """The per-step log line afbench's engines print, which :data:`DEFAULT_STEP_PATTERN` reads
    back: ``step: N  loss: L  elapsed_time_per_step: X.XXXXXXs`` (seconds) then ``key: value``
    for each extra field (floats to 4 decimals), in the reference's format so that its strict
    parsing rules apply to afbench's own logs."""
    extra = "  ".join(
        f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}" for k, v in fields.items()
    )
    return f"step: {step:2d}  loss: {loss:8.5f}  elapsed_time_per_step: {step_time_s:.6f}s  {extra}".rstrip()


#: The loss a training loop prints on a rank that computes none: torchtitan under pipeline
#: parallelism logs ``loss: -1`` on every step of the first stage (the logging rank), and
#: Megatron-style loops do the same. Never a cross-entropy, never compared.
PLACEHOLDER_LOSS = -1.0


def is_placeholder_loss(loss: float | None) -> bool:
    """True for :data:`PLACEHOLDER_LOSS` (exactly ``-1``)."""
    return loss is not None and loss == PLACEHOLDER_LOSS


def non_finite_loss(loss: float, step: int) -> str | None:
    """The reason every engine fails a run with when a step's loss is NaN or infinite,
    ``non-finite loss (nan) at step 7``; None for a finite loss."""
    if math.isfinite(loss):
        return None
    return f"non-finite loss ({loss}) at step {step}"


def compile_step_pattern(pattern: str = DEFAULT_STEP_PATTERN) -> re.Pattern[str]:
    """Compile a step-line regex and check that it has named groups ``step`` and ``value``.

    Raises:
        ValueError: the regex does not compile or lacks one of the two named groups.
    """
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"step pattern {pattern!r} is not a valid regex: {exc}") from exc
    missing = [g for g in ("step", "value") if g not in compiled.groupindex]
    if missing:
        raise ValueError(
            f"step pattern {pattern!r} lacks named group(s) {', '.join(missing)}; "
            "it needs (?P<step>...) and (?P<value>...)"
        )
    return compiled


def _parse_value(raw: str, shown: str) -> float | str:
    """Float of a step-time token, or a string saying why it is not a valid step time.

    ``shown`` is the token as written on the line (the default pattern leaves out a trailing
    ``s``, which would turn ``281ms`` into a misleading ``281m``).
    """
    token = raw.strip()
    # A user pattern may capture the unit; the default one already drops it.
    if token.endswith("s"):
        token = token[:-1].rstrip()
    try:
        value = float(token)
    except ValueError:
        return f"value {shown!r} is not a number"
    if math.isnan(value):
        return f"value {shown!r} is NaN"
    if math.isinf(value):
        return f"value {shown!r} is infinite"
    if value == 0:
        return f"value {shown!r} is zero"
    if value < 0:
        return f"value {shown!r} is negative"
    return value


def parse_step_times(
    text: str | Iterable[str],
    first: int,
    last: int,
    pattern: str = DEFAULT_STEP_PATTERN,
    *,
    source: str = "log",
) -> dict[int, float]:
    """Step times (seconds) of steps ``first..last`` inclusive from a training log.

    Args:
        text: whole log text, or its lines (:func:`iter_log`), read line by line with
            :func:`log_lines` (ANSI escapes
            stripped, carriage-return redraws split, tqdm bars cut off); each line is matched
            with ``re.search``.
        first, last: the measured window, inclusive, ``first <= last``.
        pattern: regex with named groups ``step`` (an integer) and ``value`` (seconds,
            optionally suffixed ``s``).
        source: name of the log (a file path) used in error messages.

    Returns:
        ``{step: seconds}`` with exactly the keys ``first..last`` in order.

    Raises:
        ValueError: ``pattern`` lacks the named groups, or ``first > last``.
        InvalidLog: a window step is missing or appears more than once, or its value is
            non-numeric, NaN, infinite, zero or negative; the message lists every problem
            with its step and line numbers, and says that several ranks are logging when
            every window step appears equally often (see :func:`duplicate_step_problems`);
            a missing step names each line that reads like its step line but is excluded
            (:func:`excluded_step_line`), and why.

    A merged log whose step lines all carry torchrun's ``[rankN]:`` prefix, with several
    ranks present, is read for the lowest rank only (:func:`_lowest_rank_only`).
    """
    compiled = compile_step_pattern(pattern)
    if first > last:
        raise ValueError(f"step window {first}..{last} is empty (first > last)")

    seen: dict[int, list[tuple[int, str, str]]] = {}
    ranks: dict[int, int | None] = {}  # line number -> the torchrun [rankN]: prefix's N
    excluded: dict[int, list[str]] = {}  # step -> "line N (why)" of step-like lines left out
    default = pattern == DEFAULT_STEP_PATTERN
    for lineno, line in log_lines(text):
        if default and "elapsed_time_per_step" not in line:
            continue  # no step line, nor one kept out (a MiB line: 0.1 s of regex saved)
        match = compiled.search(line)
        if match is None:
            hidden = excluded_step_line(line) if pattern == DEFAULT_STEP_PATTERN else None
            if hidden is not None and first <= hidden[0] <= last:
                excluded.setdefault(hidden[0], []).append(f"line {lineno} ({hidden[1]})")
            continue
        raw_step, raw_value = match.group("step"), match.group("value")
        if raw_step is None or raw_value is None:
            continue
        try:
            step = int(raw_step.strip())
        except ValueError:
            raise InvalidLog(
                f"{source}: line {lineno}: step {raw_step!r} is not an integer"
            ) from None
        if first <= step <= last:
            rest = line[match.start("value") :].split(maxsplit=1)
            shown = rest[0] if rest else raw_value
            seen.setdefault(step, []).append((lineno, raw_value, shown))
            prefix = _RANK_PREFIX_RE.match(line)
            ranks[lineno] = int(prefix.group(1)) if prefix else None
    seen = _lowest_rank_only(seen, ranks)

    problems: list[str] = []
    times: dict[int, float] = {}
    window = range(first, last + 1)
    problems += duplicate_step_problems({s: [h[0] for h in seen[s]] for s in window if s in seen})
    for step in window:
        hits = seen.get(step, [])
        if not hits:
            problems.append(
                f"step {step} is missing"
                + (
                    "; " + ", ".join(excluded[step]) + " reads like its step line but is not one "
                    "(if it is your loop's step line, set engine.step_pattern to match it)"
                    if step in excluded
                    else ""
                )
            )
            continue
        if len(hits) > 1:
            continue
        lineno, raw_value, shown = hits[0]
        parsed = _parse_value(raw_value, shown)
        if isinstance(parsed, str):
            problems.append(f"step {step} (line {lineno}): {parsed}")
        else:
            times[step] = parsed
    if problems:
        raise InvalidLog(f"{source}: invalid step window {first}..{last}: " + "; ".join(problems))
    return times


#: torchrun's per-rank prefix of a merged log (``--tee`` / ``--log-dir`` redirects, and
#: ``torch.distributed.elastic``'s console): ``[rank0]:``, ``[rank1]:`` ..., and its
#: ``[${role_name}${local_rank}]:`` form (``[default0]:``, ``[trainer1]:``, or ``[0]:`` from
#: ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}]:"``), as the torchtitan console parser
#: reads them (afbench.engines.torchtitan.parsers).
_RANK_PREFIX_RE = re.compile(r"^\[(?:[A-Za-z_]+)?(\d+)\]:")


def _lowest_rank_only(
    seen: dict[int, list[tuple[int, str, str]]], ranks: dict[int, int | None]
) -> dict[int, list[tuple[int, str, str]]]:
    """When every step line carries a ``[rankN]:`` prefix and more than one rank is present,
    keep the lowest rank's lines (rank 0: torchtitan and the builtin loop log their metrics
    from rank 0); otherwise ``seen`` unchanged, so unprefixed duplicates stay an error."""
    present = set(ranks.values())
    if None in present or len(present) < 2:
        return seen
    keep = min(r for r in present if r is not None)
    kept = {step: [h for h in hits if ranks[h[0]] == keep] for step, hits in seen.items()}
    return {step: hits for step, hits in kept.items() if hits}


#: Said when every step of a window is logged the same number of times (> 1).
RANK_HINT = (
    "several ranks are logging without a rank prefix; keep one rank's output "
    "(set the rank filter, e.g. torchtitan's LOG_RANK=0 or torchrun --local-ranks-filter 0)"
)


def duplicate_step_problems(lines_by_step: dict[int, list[int]]) -> list[str]:
    """One message per step logged more than once, plus :data:`RANK_HINT` when every step
    given is logged the same number of times (the shape of a log that every rank of a
    data-parallel job writes into, with no ``[rankN]:`` prefix to tell them apart).

    Args:
        lines_by_step: ``{step: [line numbers it appears on]}`` (1-based line numbers).

    Returns:
        e.g. ``["step 6 is duplicated (2 times, lines 3, 4)", ..., "every step appears 2
        times: several ranks are logging ..."]``; empty when no step repeats.
    """
    problems = [
        f"step {step} is duplicated ({len(lines)} times, lines {', '.join(map(str, lines))})"
        for step, lines in sorted(lines_by_step.items())
        if len(lines) > 1
    ]
    counts = {len(lines) for lines in lines_by_step.values()}
    if len(problems) > 3:  # the first three locate it; the rest only lengthen the line
        problems = problems[:3] + [f"and {len(problems) - 3} more duplicated steps"]
    if problems and len(counts) == 1:
        problems.append(f"every step appears {counts.pop()} times: {RANK_HINT}")
    return problems


def check_unique_steps(steps: list[tuple[int, int]], *, source: str = "log") -> None:
    """Raise when a step is logged more than once, so that no parser lets the first (or the
    last) of several lines for one step silently win.

    Args:
        steps: ``(step, line number)`` pairs of one rank's step lines, in log order.
        source: name of the log used in the message.

    Raises:
        InvalidLog: a step appears more than once; the message lists every such step with
            its count and lines, and says that several ranks are logging when every step
            repeats equally often.
    """
    lines_by_step: dict[int, list[int]] = {}
    for step, lineno in steps:
        lines_by_step.setdefault(step, []).append(lineno)
    problems = duplicate_step_problems(lines_by_step)
    if problems:
        raise InvalidLog(f"{source}: " + "; ".join(problems))


def read_step_times(
    path: Path | str,
    first: int = VERDICT_FIRST_STEP,
    last: int = VERDICT_LAST_STEP,
    pattern: str = DEFAULT_STEP_PATTERN,
) -> dict[int, float]:
    """:func:`parse_step_times` over a log file (UTF-8, undecodable bytes replaced).

    Raises:
        InvalidLog: the file cannot be read, or the window is invalid (see above).
        ValueError: bad ``pattern`` or window.
    """
    path = Path(path)
    try:  # streaming: memory holds the step records, never the log
        return parse_step_times(iter_log(path), first, last, pattern, source=str(path))
    except OSError as exc:
        raise InvalidLog(f"{path}: cannot read log: {exc.strerror or exc}") from exc


def mean_step_time(times: dict[int, float]) -> float:
    """Arithmetic mean (seconds) of the step times returned by :func:`parse_step_times`.

    Raises:
        ValueError: ``times`` is empty.
    """
    if not times:
        raise ValueError("no step times to average")
    return math.fsum(times.values()) / len(times)
