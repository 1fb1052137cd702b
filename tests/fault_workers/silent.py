"""Prints nothing and exits 0."""
