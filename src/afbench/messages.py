"""Report sentences as data: every sentence a report shows comes from the label catalog
(``afbench/report/templates/labels.yaml``, one table per ``report.lang``), never from English
built in Python.

A sentence that code decides on (a parity reason, a caveat, a profiling status) is a
:class:`Message`: the catalog key and the values it carries (numbers stay numbers; the
catalog words and formats them, ``{delta_pct:+.1f}``). ``summary.json`` stores each message
with its English ``text`` beside the key and values, for readers of the JSON; the report
templates render it in their own language with the ``say`` filter
(:func:`afbench.report.render.environment`).

What a run records for a later report (memory and TFLOPs sources, the memory window, a
switch's detail, a skip or contention reason in ``status.json``) is a message too, so a report
in any language words it; text that is not afbench's (a worker's error line, a code call) is
:func:`as_written`, shown as written in every language, and so is a plain string a directory
of schema 4 or older recorded (its upgrade: :func:`afbench.store.versioning.as_messages`).

A leaf module: it imports no other afbench package, so every layer (compare, sweep, report)
can build messages.
"""

from __future__ import annotations

import functools
import string
from pathlib import Path
from typing import Any

from pydantic import BaseModel, model_validator

#: The label catalog: ``{lang: {key: text}}``; English fills any key a language lacks.
CATALOG = Path(__file__).parent / "report" / "templates" / "labels.yaml"


class Message(BaseModel):
    """One catalog sentence: ``key`` in labels.yaml, ``args`` the values its ``{name}`` /
    ``{name:format}`` fields take (numbers, strings, or nested messages as dicts), ``text``
    the English sentence (for JSON readers and as the fallback of a key a catalog lacks)."""

    key: str
    args: dict[str, Any] = {}
    text: str = ""

    @model_validator(mode="after")
    def _english(self) -> "Message":
        # a message given as plain data ({"key", "args"}: afbench.analysis, which imports no
        # afbench package) gets its English text from the catalog
        table = _labels("en")
        if not self.text and self.key in table:
            self.text = render(self, table)
        return self

    def __hash__(self) -> int:  # a template's ``unique`` filter
        return hash((self.key, self.text))

    def __str__(self) -> str:  # a template that prints a message without ``say``: English
        return self.text


def labels(lang: str = "en") -> dict[str, str]:
    """Labels of ``lang`` from :data:`CATALOG`, English filling any key it lacks (a fresh
    dict: the caller may change it).

    Raises:
        OSError: the catalog cannot be read; KeyError: it has no ``en`` table.
    """
    return dict(_labels(lang))


@functools.lru_cache(maxsize=4)
def _labels(lang: str) -> dict[str, str]:
    import yaml  # here, not at the top: a worker that records no message never loads it

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


def render(message: Message | dict[str, Any] | list | str | None, table: dict[str, str]) -> str:
    """``message`` in the language of ``table`` (a :func:`labels` table): its key's text filled
    with its args; its stored English text when ``table`` lacks the key; a list of messages
    joined by the catalog's ``list_sep``; a plain string as it is (text recorded before
    messages, an error text); ``""`` for None."""
    if message is None:
        return ""
    if isinstance(message, list):
        return table.get("list_sep", LIST_SEP).join(render(m, table) for m in message)
    if isinstance(message, str):
        return message
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
    return Message(key=key, args=args)


#: The catalog key of a text recorded in English before messages existed (an older run's
#: memory source, skip reason, switch detail) or of a text that is not afbench's (an error
#: message, a command's output): its template is ``{text}``, in every language.
AS_WRITTEN = "as_written"


def as_written(text: str) -> Message:
    """``text`` as a :class:`Message` every language shows as written (:data:`AS_WRITTEN`):
    the upgrade of a plain string a stored file holds, and a run's own error text."""
    return Message(key=AS_WRITTEN, args={"text": text}, text=text)
