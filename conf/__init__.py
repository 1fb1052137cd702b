"""Hydra config tree of afbench (shipped in the wheel as afbench.conf)."""
