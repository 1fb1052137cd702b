"""Every problem of one command line at once, through Hydra's public ``compose``.

Hydra's composition stops at the first bad override. :func:`config_problems` reports it in one
line (with a did-you-mean for an unknown key), leaves that override out and composes again, so
``scheduler.stepz=1 report.langg=zh`` names both keys; the config that composes is then
validated and planned (every bad value, variant and phase, one line each).
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from afbench.errors import AfbenchError


def compose_config(conf_dir: str, overrides: list[str]) -> DictConfig:
    """The task config (no ``hydra`` node) that ``overrides`` compose. Raises Hydra's and
    OmegaConf's exceptions."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def check_composed(cfg: DictConfig) -> None:
    """Validate and plan one composed config (planning writes nothing: variant and phase
    errors surface here too). Raises ConfigError and friends."""
    from afbench.config import validate_config
    from afbench.plan import make_plan

    make_plan(validate_config(cfg), Path(os.devnull) / "dry-run")


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def _did_you_mean(key: str, conf_dir: str, groups: list[str]) -> str:
    """`` did you mean 'a.b'?`` for the first segment of ``key`` that does not exist in the
    config the group selections ``groups`` compose, or ''."""
    try:
        node = compose_config(conf_dir, groups)
    except Exception:  # no suggestion then; the message still names the key
        return ""
    done: list[str] = []
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            break
        if part not in node:
            guess = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1)
            return f" did you mean '{'.'.join(done + [guess[0]])}'?" if guess else ""
        done.append(part)
        node = node[part]
    return ""


def hydra_problem(exc: Exception, overrides: list[str], conf_dir: str) -> tuple[str, list[str]]:
    """One line for a Hydra composition error, and the overrides it is about (to leave out
    before composing again; empty when none can be named)."""
    msg = str(exc).strip()
    unknown = re.search(r"Could not override '([^']+)'", msg)
    if unknown and "To append to your config" in msg:
        key = unknown.group(1)
        given = [o for o in overrides if _key(o) == key]
        from afbench.config.validate import moved  # omegaconf only, loaded already

        line = moved(key, given[0].partition("=")[2]) if given else None
        if line:
            return line, given
        groups = [o for o in overrides if "." not in _key(o) and not o.startswith(("+", "~"))]
        hint = _did_you_mean(key, conf_dir, groups)
        # every section's keys are fixed (the free-form maps already take new keys): a
        # '+' would only move the typo to the schema's error, so it is offered only where
        # no known key is close
        plus = "" if hint else f" (to add a new key write +{key}=...)"
        return (f"{key}: unknown key;{hint}{plus}", [o for o in overrides if _key(o) == key])
    lines = msg.splitlines()
    about = [
        o
        for o in overrides
        if f"'{_key(o)}" in msg or f"'{_key(o)}/" in msg or f"{_key(o)}=" in msg
    ]
    if "Could not find" in msg:
        options = []
        for line in lines[1:]:
            if line.startswith("Config search path"):
                break
            if line.startswith("\t"):
                options.append(line.strip())
        first = lines[0].replace("In 'config': ", "")
        return (f"{first}; available: {', '.join(options)}" if options else first), about
    return " ".join(ln.strip() for ln in lines if ln.strip() and "hydra.cc" not in ln), about


def config_problems(
    overrides: list[str], conf_dir: str, failed: Exception | None = None
) -> list[str]:
    """Every problem of ``overrides``, one line each (empty: the command line is fine).

    Composes, and on a Hydra error names it, leaves the override it is about out and composes
    again (at most once per override); the config that composes is validated and planned. A
    config whose remaining overrides only select groups is not validated again after an error
    (nothing more of the user's can be wrong there, and it keeps the common typo fast).
    ``failed``: the error a composition of ``overrides`` already raised (not composed again).
    """
    problems: list[str] = []
    pending = list(overrides)
    for _ in range(len(overrides) + 1):
        if problems and all("." not in _key(o) for o in pending):
            return problems
        try:
            if failed is not None:
                raise failed
            cfg = compose_config(conf_dir, pending)
        except (HydraException, OmegaConfBaseException) as exc:
            failed = None
            line, about = hydra_problem(exc, pending, conf_dir)
            problems.append(line)
            if not about:
                return problems
            pending = [o for o in pending if o not in about]
            continue
        try:
            check_composed(cfg)
        except AfbenchError as exc:
            problems += str(exc).splitlines()
        return problems
    return problems
