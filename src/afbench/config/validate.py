"""Validation of the composed config and translation of errors into one line per bad key."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from afbench.config.base import Section
from afbench.config.models import PAST_LAST_STEP, AfbenchConfig, RunConfig
from afbench.config.short import SHORT_MIN_STEPS, short_run
from afbench.config.verdict import MOVED
from afbench.errors import ConfigError


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_models_in(arg))
    return out


def _union_tags(model: type[BaseModel]) -> dict[str, set[str]]:
    """Tags pydantic inserts in error locations of discriminated unions, per field: the
    defaults of each member's discriminator (``{"engine": {"builtin", "command", ...}}``), read
    from the schemas so that a new engine or workload needs no entry here."""
    tags: dict[str, set[str]] = {}
    for name, field in model.model_fields.items():
        disc = field.discriminator
        if isinstance(disc, str):
            tags[name] = {m.model_fields[disc].default for m in _models_in(field.annotation)}
    return tags


_UNION_TAGS = _union_tags(RunConfig)


def _fields_at(model: type[BaseModel], path: tuple[str, ...]) -> set[str]:
    """Field names valid at ``path`` below ``model`` (union members merged)."""
    models = [model]
    for part in path:
        nxt: list[type[BaseModel]] = []
        for m in models:
            field = m.model_fields.get(part)
            if field is not None:
                nxt.extend(_models_in(field.annotation))
        models = nxt
    return {
        name
        for m in models
        for name in (m.valid_keys() if issubclass(m, Section) else m.model_fields)
    }


def _dotted(loc: tuple[Any, ...]) -> tuple[str, ...]:
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[1] in _UNION_TAGS.get(parts[0], ()):
        del parts[1]
    return tuple(parts)


def moved(key: str, value: Any) -> str | None:
    """The one line refusing a key that moved to another section
    (:data:`afbench.config.verdict.MOVED`): ``experiment.repeats moved to verdict.rounds: write
    verdict.rounds=5``; None for a key that did not move."""
    new = MOVED.get(key)
    if new is None:
        return None
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
    return f"{key} moved to {new}: write {new}={shown}"


def format_validation_error(
    err: ValidationError, model: type[BaseModel] = AfbenchConfig, prefix: str = ""
) -> str:
    """One line per problem: ``<dotted.key>: <what is wrong>; <what to do>``."""
    lines = []
    for e in err.errors():
        path = _dotted(e["loc"])
        key = prefix + ".".join(path) if path else (prefix.rstrip(".") or "<config>")
        old = e["type"] == "extra_forbidden" and model is AfbenchConfig and not prefix
        if old and (line := moved(key, e.get("input"))):
            lines.append(line)
        elif e["type"] == "extra_forbidden":
            known = sorted(_fields_at(model, path[:-1]))
            loc = [str(p) for p in e["loc"]]
            tag = loc[1] if len(loc) > 2 and loc[1] in _UNION_TAGS.get(loc[0], ()) else None
            if tag is not None and path[-1] in known:
                # a key of another member of the union (engine.env with engine=builtin)
                also = (
                    " (engine=command; for every run's environment, whatever the engine: "
                    "launcher.env.<NAME>=...)"
                    if path[-1] == "env"
                    else ""
                )
                lines.append(
                    f"{key}: {loc[0]}={tag} has no key {path[-1]!r}; another {loc[0]} has it{also}"
                )
                continue
            guess = difflib.get_close_matches(path[-1], known, n=1)
            hint = f"did you mean '{guess[0]}'? " if guess else ""
            lines.append(f"{key}: unknown key; {hint}valid keys here: {', '.join(known)}")
        elif e["type"] == "missing":
            lines.append(f"{key}: required but missing; set it in YAML or as {key}=...")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            given = e.get("input")
            shown = "" if isinstance(given, (dict, list)) or given is None else f" (got {given!r})"
            if isinstance(given, bool) and e["type"] == "string_type":
                # YAML 1.1 (PyYAML, OmegaConf) reads off/on/yes/no unquoted as booleans
                shown += (
                    f"; YAML reads an unquoted off/on/yes/no/true/false as a boolean: quote "
                    f"the name, e.g. '{'on' if given else 'off'}'"
                )
            lines.append(f"{key}: {msg}{shown}" if path else f"{prefix}{msg}{shown}")
    return "\n".join(lines)


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """Resolve interpolations; a mandatory ``???`` value becomes a ConfigError naming its key."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(
            "\n".join(
                f"{k}: required but not set (???); set it, e.g. {k}=/abs/path" for k in missing
            )
        )
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or "<config>"
        raise ConfigError(f"{key}: {exc.msg if hasattr(exc, 'msg') else exc}") from exc
    data.pop("hydra", None)
    return data


def validate_config(cfg: DictConfig | dict[str, Any]) -> AfbenchConfig:
    """Validate the composed config.

    Raises ConfigError with one line per bad key (unknown key with a did-you-mean, wrong type,
    out-of-range value, inconsistent settings).
    """
    data = to_container(cfg) if isinstance(cfg, DictConfig) else cfg
    if data.get("experiment") is None:
        data.pop("experiment", None)
    steps = (data.get("experiment") or {}).get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps >= SHORT_MIN_STEPS:
        data = short_run(data, steps)  # experiment.steps: the composed config runs short too
    try:
        return AfbenchConfig.model_validate(data)
    except ValidationError as err:
        phases = (data.get("experiment") or {}).get("phases") or {}
        setting = [
            f"experiment.phases.{p}"
            for p, o in phases.items()
            if isinstance(o, dict) and _sets(expand_dotted(o, p), ("scheduler", "steps"))
        ]
        raise ConfigError(with_window_advice(format_validation_error(err), setting)) from None


def _sets(tree: dict[str, Any], parts: tuple[str, ...]) -> bool:
    for part in parts:
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def with_window_advice(
    message: str, phases_setting_steps: list[str], phase: str | None = None
) -> str:
    """``message`` with advice after each line saying a step window ends past the run's last
    step, matched to where the steps were set: on the command line or in the recipe's top
    level (``phase`` None), where the recipe's own phases may set steps again
    (``phases_setting_steps``: the dotted phase keys), or in phase ``phase``."""
    short = (
        "for a short run write experiment.steps=N (N >= %d: every phase's steps and its "
        "measured and profiler windows follow)" % SHORT_MIN_STEPS
    )
    if phase is not None:
        advice = (
            f"{short}, or set experiment.phases.{phase}.scheduler.measure (and "
            f"optimization.profiler_window) inside that phase's steps"
        )
    elif phases_setting_steps:
        advice = (
            f"the recipe's phases set their own steps ({', '.join(phases_setting_steps)}"
            f"), so scheduler.steps does not reach them: {short}"
        )
    else:
        advice = f"{short}, or set scheduler.measure.first_step/last_step inside scheduler.steps"
    return "\n".join(
        f"{line}: {advice}" if PAST_LAST_STEP in line else line for line in message.splitlines()
    )


def expand_dotted(overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """Nested dict from overrides given as dotted keys (``{"a.b": 1}``), nested mappings
    (``{"a": {"b": 1}}``) or a mix of both."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        parts = str(key).split(".")
        if any(not p for p in parts):
            raise ConfigError(f"{where}: malformed key '{key}'")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}: key '{key}' conflicts with another override")
        leaf = parts[-1]
        if isinstance(value, dict):
            value = expand_dotted(value, where)
            if isinstance(node.get(leaf), dict):
                value = OmegaConf.to_container(OmegaConf.merge(node[leaf], value))
        node[leaf] = value
    return out


def apply_overrides(base: dict[str, Any], overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """Merge overrides (dotted keys or nested mappings) into a copy of a plain config dict.

    Unknown keys are kept so that validation (:func:`validate_run_config`) reports them with
    the dotted key and a did-you-mean; ``where`` names the YAML node for other errors.
    """
    merged = OmegaConf.merge(
        OmegaConf.create(base), OmegaConf.create(expand_dotted(overrides, where))
    )
    return OmegaConf.to_container(merged, resolve=True)


def check_unknown_keys(data: dict[str, Any], where: str) -> None:
    """Raise ConfigError, prefixed with ``where``, for the keys of ``data`` that no
    :class:`RunConfig` has; other problems are left to :func:`validate_run_config` (a phase's
    settings may only become valid with a variant's). So a typo in a recipe's
    ``experiment.phases.<p>`` is named there, not under the first variant."""
    try:
        RunConfig.model_validate(data)
    except ValidationError as err:
        unknown = [e for e in err.errors() if e["type"] == "extra_forbidden"]
        if unknown:
            only = ValidationError.from_exception_data(err.title, unknown)
            raise ConfigError(
                format_validation_error(only, RunConfig, prefix=f"{where}: ")
            ) from None


def validate_run_config(data: dict[str, Any], where: str, phase: str | None = None) -> RunConfig:
    """Validate one run's effective config; errors are prefixed with ``where`` (advice for a
    step window past the end names ``experiment.phases.<phase>``)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        message = format_validation_error(err, RunConfig, prefix=f"{where}: ")
        raise ConfigError(with_window_advice(message, [], phase)) from None
