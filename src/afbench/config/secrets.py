"""Secrets of a config, and their masked form in every file afbench writes.

A value is secret when it is the password of a URL (``scheme://user:PASSWORD@host``, e.g.
``history.url``) or the value of an environment variable (``launcher.env``, ``engine.env``)
whose name ends in ``_TOKEN`` or ``_KEY`` or holds ``PASSWORD`` or ``SECRET``
(``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``). Files get :data:`MASK` in its
place: afbench's JSON files (:func:`masked`, in
:meth:`afbench.store.versioning.FileSchema.write`), a run's ``config.yaml``, Hydra's ``.hydra/``
copies and ``multirun.yaml`` (:func:`afbench.cli.mask_hydra_files`) and afbench's log lines
(:class:`MaskingFilter`, on cli.log's handler). The run still gets the real values: the
launcher hands them to the worker in its environment, and the worker puts them back into the
RunSpec it reads (:func:`unmask_env`). A run's own output (stdout.log) is its program's, not
filtered.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

MASK = "***"
#: an environment variable whose value is secret (names are [A-Z_][A-Z0-9_]*)
SECRET_NAME = re.compile(r"[A-Z0-9_]*(?:_TOKEN|_KEY)|[A-Z0-9_]*(?:PASSWORD|SECRET)[A-Z0-9_]*")
_URL_PASSWORD = re.compile(r"(://[^:/@\s'\"]*:)[^@\s'\"]+@")
#: ``NAME=value`` (an override, a log line), ``NAME: value`` (YAML), ``"NAME": "value"`` (JSON)
_ASSIGNED = re.compile(
    r"""(\b(?:[A-Z0-9_]*(?:_TOKEN|_KEY)|[A-Z0-9_]*(?:PASSWORD|SECRET)[A-Z0-9_]*)\b["']?"""
    r"""[ \t]*[:=][ \t]*)("[^"\n]*"|'[^'\n]*'|[^\s,;'"\])}]+)"""
)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable named ``name`` holds a secret (:data:`SECRET_NAME`)."""
    return SECRET_NAME.fullmatch(name) is not None


def mask_text(text: str) -> str:
    """``text`` with every URL password and every value assigned to a secret name
    (``HF_TOKEN=abc``, ``HF_TOKEN: abc``, ``"HF_TOKEN": "abc"``) replaced by :data:`MASK`
    (quotes kept)."""

    def value(m: re.Match[str]) -> str:
        v = m.group(2)
        quoted = v[:1] in "\"'" and len(v) > 1
        return m.group(1) + (v[0] + MASK + v[0] if quoted else MASK)

    return _ASSIGNED.sub(value, _URL_PASSWORD.sub(rf"\1{MASK}@", text))


def masked(data: Any) -> Any:
    """``data`` (JSON content: dicts, lists, strings, numbers) with each string value of a key
    that is a secret name replaced by :data:`MASK` and every string passed through
    :func:`mask_text`; a copy, ``data`` is unchanged."""
    if isinstance(data, dict):
        return {
            k: MASK
            if isinstance(v, str) and isinstance(k, str) and is_secret_name(k)
            else masked(v)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [masked(v) for v in data]
    return mask_text(data) if isinstance(data, str) else data


def secret_env(env: dict[str, str]) -> dict[str, str]:
    """The entries of ``env`` whose names are secret (what a file holds as :data:`MASK`)."""
    return {k: v for k, v in env.items() if is_secret_name(k)}


def unmask_env(env: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (read back from a file) with each :data:`MASK` value of a secret name taken
    from ``environ`` (default ``os.environ``: the launcher put the real value there)."""
    environ = os.environ if environ is None else environ
    return {k: environ.get(k, v) if v == MASK and is_secret_name(k) else v for k, v in env.items()}


class MaskingFilter(logging.Filter):
    """A logging filter that masks secrets (:func:`mask_text`) in every record it passes, so
    a log file never holds one (an override quoted in an error line, a URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if mask_text(text) != text:
            record.msg, record.args = mask_text(text), ()
        return True
