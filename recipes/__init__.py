"""Experiment recipes, selectable as experiment=<name> (shipped as afbench.recipes)."""
