"""Config: typed models of the composed Hydra config and their validation."""

from afbench.config.models import AfbenchConfig, ExperimentConfig, RunConfig
from afbench.config.validate import apply_overrides, validate_config, validate_run_config

__all__ = [
    "AfbenchConfig",
    "ExperimentConfig",
    "RunConfig",
    "apply_overrides",
    "validate_config",
    "validate_run_config",
]
