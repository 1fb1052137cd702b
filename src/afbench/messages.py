"""Report sentences as data: every sentence a report shows comes from the label catalog
(``afbench/report/templates/labels.yaml``, one table per ``report.lang``), never from English
built in Python.

A sentence that code decides on (a parity reason, a caveat, a profiling status) is a
:class:`Message`: the catalog key and the values it carries (numbers stay numbers; the
catalog words and formats them, ``{delta_pct:+.1f}``). ``summary.json`` stores each message
with its English ``text`` beside the key and values, for readers of the JSON; the report
templates render it in their own language with the ``say`` filter
(:func:`afbench.report.render.environment`).

A leaf module: it imports no other afbench package, so every layer (compare, sweep, report)
can build messages.
"""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

#: The label catalog: ``{lang: {key: text}}``; English fills any key a language lacks.
CATALOG = Path(__file__).parent / "report" / "templates" / "labels.yaml"


class Message(BaseModel):
    """One catalog sentence: ``key`` in labels.yaml, ``args`` the values its ``{name}`` /
    ``{name:format}`` fields take (numbers, strings, or nested messages as dicts), ``text``
    the English sentence (for JSON readers and as the fallback of a key a catalog lacks)."""

    key: str
    args: dict[str, Any] = {}
    text: str = ""


def labels(lang: str = "en") -> dict[str, str]:
    """Labels of ``lang`` from :data:`CATALOG`, English filling any key it lacks (a fresh
    dict: the caller may change it).

    Raises:
        OSError: the catalog cannot be read; KeyError: it has no ``en`` table.
    """
    return dict(_labels(lang))


@functools.lru_cache(maxsize=4)
def _labels(lang: str) -> dict[str, str]:
    # libyaml's loader where PyYAML has it (5x faster on the 2-language table), else PyYAML's
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    table = yaml.load(CATALOG.read_text(encoding="utf-8"), Loader=loader)
    return {**table["en"], **table.get(lang, {})}


#: How a list of messages given as one argument is joined (clauses of one sentence), unless
#: the catalog's ``list_sep`` says otherwise.
LIST_SEP = "; "


def _is_message(value: Any) -> bool:
    return isinstance(value, Message) or (isinstance(value, dict) and "key" in value)


class _Args(dict):
    """Format arguments: a nested message is rendered in the same language, a list of
    messages too, joined by :data:`LIST_SEP`."""

    def __init__(self, args: dict[str, Any], table: dict[str, str]) -> None:
        super().__init__(args)
        self.table = table

    def __getitem__(self, name: str) -> Any:
        value = super().__getitem__(name)
        if _is_message(value):
            return render(value, self.table)
        if isinstance(value, list) and value and all(map(_is_message, value)):
            return self.table.get("list_sep", LIST_SEP).join(render(v, self.table) for v in value)
        return value


def fill(template: str, table: dict[str, str] | None = None, /, **args: Any) -> str:
    """``template`` with its ``{name}`` / ``{name:spec}`` fields filled from ``args``
    (``str.format`` rules; a nested message is rendered with ``table``).

    Raises:
        KeyError: a field has no value; ValueError: a format spec does not fit its value.
    """
    return string.Formatter().vformat(template, (), _Args(args, table or _labels("en")))


#: Sentences a run records in English in its result.json / status.json (how memory and TFLOPs
#: were measured, why a run was skipped), written by the worker and the launcher before the
#: report exists, and the catalog key each is: the report shows them in its own language
#: (:func:`recorded`). Each pattern is the whole text its writer produces (tests hold them
#: to the writers' constants); anything else recorded (an error message) is shown as written.
RECORDED: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), key)
    for p, key in (
        (
            r"VmHWM from /proc/self/status after clear_refs reset \(peak RSS of the whole process\)",
            "src_vmhwm",
        ),
        (
            r"resource\.getrusage ru_maxrss \(peak RSS of the whole process since it started, not "
            r"resettable here: includes model loading and warm-up\)",
            "src_maxrss",
        ),
        (
            r"torch\.(?P<kind>\w+)\.max_memory_allocated / max_memory_reserved of (?P<device>\S+) "
            r"after torch\.\w+\.reset_peak_memory_stats",
            "src_device_memory",
        ),
        (r"not measured on backend (?P<backend>\S+)", "src_not_measured"),
        (r"not reported \(engine (?P<engine>\S+)\)", "src_not_reported"),
        (
            r"torchtitan step log 'memory: X GiB\(Y%\)': reserved_bytes\.all\.peak of rank 0's "
            r"device, reset after each logged step; max over the window",
            "src_titan_memory",
        ),
        (
            r"afbench: 6N \+ 12\*L\*H\*Q\*T FLOPs per token \(PaLM App\. B, as torchtitan\) x "
            r"measured tokens/s per device over the window",
            "src_tflops",
        ),
        (
            r"afbench: 6N \+ 12\*L\*H\*Q\*T FLOPs per token \(PaLM App\. B, as torchtitan\) x "
            r"measured tokens/s per device over the window \(parameters counted as Qwen3's; "
            r"model_type is (?P<model_type>\S+)\)",
            "src_tflops_other_model",
        ),
        (
            r"torchtitan step log 'tflops:' / 'mfu:' \(its own FLOP count and peak\); mean over the "
            r"window",
            "src_titan_tflops",
        ),
        (
            r"n/a: no published peak for device (?P<device>.+); set backend\.peak_tflops",
            "peak_unknown_device",
        ),
        (
            r"n/a: model dtype (?P<dtype>\S+), the published peak of (?P<device>.+) is BF16 dense; "
            r"set backend\.peak_tflops for this precision",
            "peak_other_dtype",
        ),
        (
            r"steps (?P<first>\d+)-(?P<last>\d+) \(counters reset after (?P<warm>\d+) warm-up "
            r"steps\)",
            "memory_window_steps",
        ),
        (
            r"runs (?P<first>\d+)-(?P<last>\d+) \(counters reset after (?P<warm>\d+) warm-up "
            r"runs\)",
            "memory_window_runs",
        ),
        (
            r"2 \(K, V\) x layers x kv_heads x head_dim x \(longest prompt \+ max_new_tokens\) x batch "
            r"x dtype bytes, from config\.json",
            "src_kv_cache",
        ),
        (r"(?P<profiler>.+) profiler, steps (?P<first>\d+)-(?P<last>\d+)", "switch_profiler_steps"),
        (r"(?P<profiler>.+) profiler, runs (?P<first>\d+)-(?P<last>\d+)", "switch_profiler_runs"),
        (
            r"(?P<sites>\d+) sites: residual add \+ post_attention_layernorm -> (?P<op>\S+)",
            "switch_add_rmsnorm",
        ),
        (r"(?P<sites>\d+) sites: RMSNorm -> (?P<op>\S+)", "switch_rmsnorm"),
        (r"baseline run (?P<run>\S+) did not succeed", "skip_baseline_failed"),
        (r"earlier run (?P<run>\S+) did not succeed", "skip_earlier_failed"),  # older runs
        (
            r"earlier run (?P<run>\S+) did not succeed \(skip_policy reference: a failed run skips "
            r"every later (?:phase|run)\)",
            "skip_earlier_reference",
        ),
        (
            r"earlier run (?P<run>\S+) of this variant did not succeed \(skip_policy per_variant: a "
            r"failed variant's later phases are skipped\)",
            "skip_earlier_own_variant",
        ),
        (
            r"earlier baseline run (?P<run>\S+) did not succeed \(skip_policy per_variant: after a "
            r"failed baseline every variant's later phases are skipped\)",
            "skip_earlier_baseline",
        ),
        (r"interrupted \(SIGINT/SIGTERM to afbench\)", "skip_interrupted"),
        (r"interrupted", "run_interrupted"),
        (r"not run", "run_not_run"),
        # afbench.analysis.contention.REASON_TEXT (judge's reasons: progress lines, status.json)
        (
            r"window of (?P<wall>[\d.]+) s too short to judge \(< (?P<limit>[\d.]+) s\)",
            "cont_reason_short",
        ),
        (r"waited for a CPU (?P<wait>\d+)% of the window > (?P<limit>[\d.]+)%", "cont_reason_wait"),
        (r"steal (?P<steal>[\d.]+)% > (?P<limit>[\d.]+)%", "cont_reason_steal"),
        (r"CPU pressure (?P<pressure>\d+)% > (?P<limit>[\d.]+)%", "cont_reason_pressure"),
        (
            r"CPU/wall (?P<cpu_per_wall>[\d.]+) of (?P<threads>\d+) thread\(s\) = (?P<share>\d+)% < "
            r"(?P<limit>[\d.]+)%",
            "cont_reason_cpu_share",
        ),
        (
            r"uniform slowdown of x(?P<ratio>[\d.]+) across (?P<similar>\d+) of (?P<ops>\d+) ops "
            r"whose launch count did not change, not in the switched ops: the (?P<side>\S+) run was "
            r"likely contended; compare the runs' contention before reading this diff",
            "uniform_slowdown_note",
        ),
        # afbench.experiment.rerun_contended's status.json reason
        (r"contended \((?P<reasons>.+)\): replaced by (?P<run>\S+)", "run_replaced_contended"),
        # a run's recorded reasons (a set-aside pair's detail before it was a message): last, as
        # it is the loosest; taken only where its reason is a recorded sentence (NESTED)
        (r"(?P<run>\S+): (?P<reason>.+)", "run_reason"),
    )
)

#: Patterns whose named part is itself recorded sentences (``"; "``-joined): the part becomes
#: their messages, rendered in the report's language; where it is not, the pattern does not
#: apply (an error message ``RunFailed: ...`` stays as written).
NESTED = {"run_replaced_contended": "reasons", "run_reason": "reason"}


def _number(value: str | None) -> Any:
    """A captured number as a number (the catalog formats it: ``{wait:.0f}``); else as is."""
    if value is not None and re.fullmatch(r"-?\d+", value):
        return int(value)
    if value is not None and re.fullmatch(r"-?\d+\.\d+", value):
        return float(value)
    return value


def _top_level_parts(text: str) -> list[str]:
    """``text`` split at the ``"; "`` outside parentheses."""
    parts, depth, cur = [], 0, ""
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth == 0 and text[i + 1 : i + 2] == " ":
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    return [p.strip() for p in parts + [cur]]


def recorded_list(text: str) -> list[Message] | None:
    """The messages of a ``"; "``-joined text whose every part is a :func:`recorded`
    sentence; None when any part is not."""
    found = [recorded(part) for part in _top_level_parts(text)]
    return None if any(m is None for m in found) else found  # type: ignore[return-value]


def recorded(text: str) -> Message | None:
    """The catalog message a recorded English sentence is (:data:`RECORDED`), its values
    taken from the text; None for any other text."""
    for pattern, key in RECORDED:
        match = pattern.fullmatch(text.strip())
        if not match:
            continue
        args = {k: _number(v) for k, v in match.groupdict().items()}
        if key in NESTED:
            inner = recorded_list(str(args[NESTED[key]]))
            if inner is None:
                continue
            args[NESTED[key]] = [m.model_dump() for m in inner]
        return Message(key=key, args=args, text=text)
    return None


def render(message: Message | dict[str, Any] | list | str | None, table: dict[str, str]) -> str:
    """``message`` in the language of ``table`` (a :func:`labels` table): its key's text filled
    with its args; its stored English text when ``table`` lacks the key; a list of messages
    joined by the catalog's ``list_sep``; a plain string that is a :func:`recorded` sentence
    (or ``"; "``-joined recorded sentences) in that language, any other as it is (a recorded
    error text); ``""`` for None."""
    if message is None:
        return ""
    if isinstance(message, list):
        return table.get("list_sep", LIST_SEP).join(render(m, table) for m in message)
    if isinstance(message, str):
        found = recorded(message)
        if found is None:
            parts = recorded_list(message) if "; " in message else None
            return render(parts, table) if parts else message
        message = found
    if isinstance(message, Message):
        message = message.model_dump()
    template = table.get(message["key"])
    if template is None:
        return str(message.get("text", ""))
    return fill(template, table, **(message.get("args") or {}))


def say(key: str, /, **args: Any) -> Message:
    """The :class:`Message` ``key`` with ``args``, its English text filled in.

    Raises:
        KeyError: ``key`` is not in the English catalog, or a field has no value.
    """
    table = _labels("en")
    if key not in table:
        raise KeyError(f"{key!r} is not a label of {CATALOG}")
    message = Message(key=key, args=args)
    message.text = render(message, table)
    return message
