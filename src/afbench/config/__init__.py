"""Config: typed models of the composed Hydra config and their validation."""

from typing import Any

__all__ = [
    "AfbenchConfig",
    "ExperimentConfig",
    "RunConfig",
    "apply_overrides",
    "validate_config",
    "validate_run_config",
]

_MODELS = ("AfbenchConfig", "ExperimentConfig", "RunConfig")
_VALIDATE = ("apply_overrides", "validate_config", "validate_run_config")


def __getattr__(name: str) -> Any:
    # Both lazily (PEP 562): validate imports omegaconf (~0.1 s), which the worker does not
    # need; the models import pydantic (~0.2 s), which the CLI does not need before a config
    # composes (afbench.config.switch_names is read before).
    if name in _MODELS:
        from afbench.config import models

        return getattr(models, name)
    if name in _VALIDATE:
        from afbench.config import validate

        return getattr(validate, name)
    raise AttributeError(f"module 'afbench.config' has no attribute {name!r}")
