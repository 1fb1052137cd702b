"""Config: typed models of the composed Hydra config and their validation."""

from typing import Any

from afbench.config.models import AfbenchConfig, ExperimentConfig, RunConfig

__all__ = [
    "AfbenchConfig",
    "ExperimentConfig",
    "RunConfig",
    "apply_overrides",
    "validate_config",
    "validate_run_config",
]

_VALIDATE = ("apply_overrides", "validate_config", "validate_run_config")


def __getattr__(name: str) -> Any:
    # validate imports omegaconf (~0.1 s): the worker reads only the models (PEP 562)
    if name in _VALIDATE:
        from afbench.config import validate  # see the comment above

        return getattr(validate, name)
    raise AttributeError(f"module 'afbench.config' has no attribute {name!r}")
