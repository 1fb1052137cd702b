"""Model converters (add_rmsnorm, rmsnorm). Placeholder until the converters land."""

from __future__ import annotations

from afbench.errors import RunSkipped


def apply_converters(model, optimization, backend) -> list:
    if optimization.add_rmsnorm or optimization.rmsnorm:
        raise RunSkipped("add_rmsnorm/rmsnorm converters are not implemented yet")
    return []
