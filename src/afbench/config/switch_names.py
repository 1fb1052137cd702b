"""The switch names that ``optimization`` accepts, handed in by the switch registry.

``afbench.config`` is the leaf layer and cannot read :mod:`afbench.switches.registry`; the
registry hands its names in when it is imported (:func:`accept`), so that a new switch is its
module plus one registry entry, with no field in ``OptimizationConfig`` and no YAML line
(docs/architecture.md, "To add a switch"). Imports nothing: the CLI stores the names in Hydra's
ConfigStore before pydantic is loaded.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

_provider: Callable[[], Sequence[str]] | None = None

#: The settings of ``optimization`` that are not switches (``OptimizationConfig``'s fields;
#: tests/test_switch_registry.py holds the two equal): a switch may not take their names.
SETTINGS = ("compile", "profiler_window", "npu_profiler", "npugraph_ex_options")
#: A switch name: a key, a ``{placeholder}`` and part of an ``AFBENCH_<NAME>`` variable.
NAME = re.compile(r"[a-z][a-z0-9_]*")


def accept(names: Callable[[], Sequence[str]]) -> None:
    """Take the registry's names: ``names()`` returns them in registry order, read at each
    validation (so a registry extended later, e.g. by a test, counts)."""
    global _provider
    _provider = names


def switch_names() -> tuple[str, ...]:
    """The registered switches' names (``optimization.<name>``, each a bool, default false).

    Raises:
        RuntimeError: no registry has handed its names in (a program that validates a config
            without importing ``afbench.switches.registry``; every afbench entry point does).
    """
    if _provider is None:
        raise RuntimeError(
            "afbench.config: no switch names were handed in; import "
            "afbench.switches.registry before validating a config"
        )
    names = tuple(_provider())
    check_names(names)
    return names


def check_names(names: Sequence[str]) -> None:
    """Raise ValueError naming the first switch name that is not a lowercase identifier
    (``[a-z][a-z0-9_]*``: it is a key, a placeholder and an environment variable), that is
    registered twice, or that is an optimization setting (:data:`SETTINGS`)."""
    seen: set[str] = set()
    for name in names:
        if not NAME.fullmatch(name):
            raise ValueError(
                f"switch name {name!r} (afbench.switches.registry.SWITCHES): use "
                "lowercase letters, digits and '_', starting with a letter"
            )
        if name in SETTINGS:
            raise ValueError(
                f"switch name {name!r} (afbench.switches.registry.SWITCHES) is the "
                f"optimization setting optimization.{name}: rename the switch"
            )
        if name in seen:
            raise ValueError(
                f"switch name {name!r} is registered twice in afbench.switches.registry.SWITCHES"
            )
        seen.add(name)
