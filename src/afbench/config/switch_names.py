"""The switch names that ``optimization`` accepts, handed in by the switch registry.

``afbench.config`` is the leaf layer and cannot read :mod:`afbench.switches.registry`; the
registry hands its names in when it is imported (:func:`accept`), so that a new switch is its
module plus one registry entry, with no field in ``OptimizationConfig`` and no YAML line
(docs/architecture.md, "To add a switch"). Imports nothing: the CLI stores the names in Hydra's
ConfigStore before pydantic is loaded.
"""

from __future__ import annotations

from typing import Callable, Sequence

_provider: Callable[[], Sequence[str]] | None = None


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
        raise RuntimeError("afbench.config: no switch names were handed in; import "
                           "afbench.switches.registry before validating a config")
    return tuple(_provider())
