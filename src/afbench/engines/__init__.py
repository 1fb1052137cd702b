"""Engines: how a workload is run. Every engine yields the same per-step records."""
