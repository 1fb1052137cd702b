"""The output directory's one schema version, and the upgrade chain every file is read through.

Every file afbench writes into an output directory carries ``schema_version``, the
directory's version (:data:`afbench.schema.SCHEMA_VERSION`, one number for all files). A file
without it is version 0. Reading a file (:meth:`FileSchema.load`) upgrades its content step by
step to the current version, ``steps[v]`` taking version ``v`` to ``v + 1``, each a small
documented function over the JSON content; then the current model validates it, and a key the
model does not name is an error naming the file and the key (a misspelt key is never kept
silently). pyperf keeps its result files loadable the same way (a format version, old versions
upgraded on load).

Versions of the directory:

- 0: no file carries ``schema_version`` (afbench before typed results): ``summary.json``
  compares with ``baseline_*`` / ``variant_*`` keys in one dict.
- 1: ``summary.json``, ``result.json``, ``status.json`` and ``sweep_summary.json`` carry
  ``schema_version: 1`` (typed results: comparisons with two sides); ``plan.json``,
  ``runspec.json`` and ``experiment.json`` carry none.
- 2: every file carries ``schema_version`` and is read and written through the store's
  models, which reject unknown keys; result.json holds memory and efficiency as nested
  records (``memory``, ``efficiency``); sweep_summary.json drops the untyped sweep summary's
  keys on the way up (:func:`afbench.store.sweep.sweep_v1_to_v2`). Still open
  (:class:`OpenRecord`): metrics.jsonl lines (an engine may add its own per-step keys).
- 3: the verdict keeps its run locations (``baseline_location_s``, ``calibration_shift_pct``).
- 4: a sweep_summary.json row holds its job's verdict and side as one ``speed`` and one
  ``side`` record, no flat copies; a main effect is a Holm-adjusted paired contrast
  (:func:`afbench.store.sweep.sweep_v3_to_v4`).
- 5: what a run records for the report is a catalog message (:class:`afbench.messages.Message`:
  key, values, English text), not an English sentence: memory and TFLOPs sources, the memory
  window, a switch's detail, a run's status reason, a rerun's contention reasons. The step
  from 4 (:func:`as_messages`) turns each such plain string into a message that shows it as
  written (``as_written``) in every language.
- 6: the settings that decide a verdict are one config section, ``verdict``: experiment.json's
  ``experiment.repeats`` / ``min_repeats`` / ``max_repeats`` / ``precision_pct`` /
  ``time_budget_s`` and ``report.confidence`` / ``min_gain_pct`` / ``contention`` move there
  (:func:`afbench.store.experiment.experiment_v5_to_v6`, the names in
  :data:`afbench.config.verdict.MOVED`); plan.json's and summary.json's ``repeats`` is
  ``rounds`` (:func:`renamed`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from afbench.config.secrets import masked
from afbench.errors import OutputError
from afbench.io import write_json_atomic
from afbench.messages import as_written
from afbench.schema import SCHEMA_VERSION

M = TypeVar("M", bound=BaseModel)
#: One upgrade step: the JSON content of version v in, of version v + 1 out.
Step = Callable[[dict[str, Any]], dict[str, Any]]


class Record(BaseModel):
    """A nested record of a stored file: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")


class OpenRecord(BaseModel):
    """A record that still keeps keys it does not name: metrics.jsonl lines only (an engine
    may add its own per-step keys; see the module docstring); every other file is made of
    :class:`Record` s."""

    model_config = ConfigDict(extra="allow")


class StoredFile(Record):
    """The top-level model of a stored file: a :class:`Record` with the directory's
    ``schema_version`` (what :meth:`FileSchema.load` upgraded it to)."""

    schema_version: int = SCHEMA_VERSION


def same_shape(data: dict[str, Any]) -> dict[str, Any]:
    """An upgrade step for a file whose content did not change between two versions."""
    return data


def as_messages(data: dict[str, Any], *paths: str) -> dict[str, Any]:
    """An upgrade step's helper: ``data`` with the plain string at each dotted path (``*``:
    every item of a list or value of a mapping, ``memory.per_rank.*.source``) turned into the
    JSON of an :func:`afbench.messages.as_written` message, which every language shows as
    written; ``""`` becomes None, a list of strings a list of messages; anything else (a
    message already, None, a missing key) is left alone. ``data`` is not changed."""

    def walk(node: Any, keys: list[str]) -> Any:
        if not keys:
            if isinstance(node, str):
                return as_written(node).model_dump() if node else None
            if isinstance(node, list) and all(isinstance(v, str) for v in node):
                return [as_written(v).model_dump() for v in node]
            return node
        key, rest = keys[0], keys[1:]
        if key == "*" and isinstance(node, list):
            return [walk(v, rest) for v in node]
        if key == "*" and isinstance(node, dict):
            return {k: walk(v, rest) for k, v in node.items()}
        if isinstance(node, dict) and key in node:
            return {**node, key: walk(node[key], rest)}
        return node

    for path in paths:
        data = walk(data, path.split("."))
    return data


def renamed(old: str, new: str) -> Step:
    """An upgrade step renaming the top-level key ``old`` to ``new`` (absent: unchanged)."""

    def step(data: dict[str, Any]) -> dict[str, Any]:
        if old not in data:
            return data
        out = {k: v for k, v in data.items() if k != old}
        out[new] = data[old]
        return out

    step.__doc__ = f"``{old}`` becomes ``{new}``."
    return step


def version_of(data: Mapping[str, Any], name: str) -> int:
    """``data``'s ``schema_version`` (0 when absent).

    Raises OutputError naming ``name`` when it is not an integer from 0 to the current
    version (a newer afbench wrote it)."""
    version = data.get("schema_version", 0)
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or not (0 <= version <= SCHEMA_VERSION)
    ):
        raise OutputError(
            f"{name}: schema_version {version!r} is not one this afbench reads "
            f"(0..{SCHEMA_VERSION}): a newer afbench wrote it; upgrade afbench "
            f"to read it"
        )
    return version


def explain(exc: ValidationError, name: str) -> str:
    """One error of ``exc`` as one line naming the file, the dotted key and the fix: an
    unknown key first (a misspelt key also leaves the key it meant missing)."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(p) for p in err["loc"]) or "(the file)"
    if err["type"] == "extra_forbidden":
        return (
            f"{name}: unknown key {key!r}: afbench writes no such key (a misspelt or "
            "hand-added key?); remove or correct it"
        )
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{name}: {key}: {err['msg']}{more}"


@dataclass(frozen=True)
class FileSchema(Generic[M]):
    """One file family of the output directory: its name, its current model, and its upgrade
    chain (``steps[v]`` takes version ``v`` to ``v + 1``; one step per version before the
    current one)."""

    name: str
    model: type[M]
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if len(self.steps) != SCHEMA_VERSION:
            raise TypeError(
                f"{self.name}: {len(self.steps)} upgrade steps for schema version "
                f"{SCHEMA_VERSION}: one per version before it is needed"
            )

    def upgrade(self, data: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
        """``data`` (this file's JSON content, any version) upgraded to the current version.

        Raises OutputError naming the file for a newer or invalid version."""
        where = where or self.name
        if not isinstance(data, Mapping):
            raise OutputError(f"{where}: holds {type(data).__name__}, not a JSON object")
        out = dict(data)
        for version in range(version_of(out, where), SCHEMA_VERSION):
            out = {**self.steps[version](out), "schema_version": version + 1}
        return out

    def load(self, data: Mapping[str, Any] | M, where: str | Path | None = None) -> M:
        """The model of ``data`` (content of any version, or a model already).

        Raises OutputError naming ``where`` (default: the file name) and the key: a newer
        version, an unknown key, a value of the wrong type."""
        if isinstance(data, self.model):
            return data
        where = str(where or self.name)
        try:
            # context: a stored file describes another machine's run (a folder it named need
            # not exist here: afbench.config.models.ReportConfig.template_dir)
            return self.model.model_validate(self.upgrade(data, where), context={"stored": True})
        except ValidationError as exc:
            raise OutputError(explain(exc, where)) from exc

    def read(self, path: Path) -> M:
        """:meth:`load` of the file at ``path``. Raises OutputError naming it when it is
        missing, not JSON, or does not fit."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OutputError(f"{path}: cannot be read as JSON ({exc})") from exc
        return self.load(data, path)

    def refuse_newer(self, path: Path) -> None:
        """Before rewriting the file at ``path`` (a re-render's summary): raises OutputError
        naming it and its version when a newer afbench wrote it (``schema_version`` above this
        afbench's), which a rewrite would silently turn into an older one. A missing,
        unreadable or older file passes: the rewrite replaces it."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            version_of(data, str(path))  # its error: the file, the version, upgrade afbench

    def write(self, path: Path, record: M) -> None:
        """Write ``record`` to ``path`` atomically, as JSON of the current version (non-finite
        floats as null: :func:`afbench.io.write_json_atomic`), every secret masked
        (:func:`afbench.config.secrets.masked`: URL passwords, ``*_TOKEN`` / ``*_KEY`` /
        ``*PASSWORD*`` / ``*SECRET*`` environment values)."""
        if not isinstance(record, self.model):
            raise TypeError(
                f"{self.name}: expected {self.model.__name__}, got {type(record).__name__}"
            )
        write_json_atomic(Path(path), masked(record.model_dump(mode="json")))
