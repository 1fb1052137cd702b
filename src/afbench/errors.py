"""Exception types of afbench.

They are raised where a problem is known and turned into one message and an exit code only
at the entry point (:mod:`afbench.cli`).
"""

from __future__ import annotations


class AfbenchError(Exception):
    """Base class. ``exit_code`` is what the command line returns for it."""

    exit_code = 1


class ConfigError(AfbenchError):
    """The composed configuration is invalid; the message names the dotted key and the fix."""

    exit_code = 2


class AssetError(AfbenchError):
    """A model, data or manifest file is missing or does not match its sha256 manifest."""

    exit_code = 2


class PreflightError(AfbenchError):
    """A preflight check failed before any run started; the message holds the FAIL lines."""

    exit_code = 3


class RunFailed(AfbenchError):
    """A worker process failed; raised inside the worker, recorded by the launcher."""

    exit_code = 1


class RunSkipped(AfbenchError):
    """A switch or setting that the backend cannot honour; the run is SKIPPED with the reason."""

    exit_code = 125


class DiskFull(AfbenchError, OSError):
    """A write found no space left (ENOSPC, EDQUOT) on the disk of an output directory; the
    message names the file system and its free space (:func:`afbench.io.disk_full_line`)."""

    exit_code = 1


class OutputError(AfbenchError):
    """A file of an output directory (result.json, summary.json) does not fit its schema or is
    of a newer schema_version; the message names the file."""

    exit_code = 2
