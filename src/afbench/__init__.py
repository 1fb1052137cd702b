"""afbench: declarative experiment orchestrator for LLM performance work.

Hydra YAML composes model, data, parallel, scheduler and optimization switches into
experiments; every variant runs as an isolated process; results are parsed strictly and
rendered into a comparative report.
"""

__version__ = "0.1.0"
