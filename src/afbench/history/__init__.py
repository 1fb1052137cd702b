"""The history of experiments: every finished experiment and sweep job in one SQL database
(SQLAlchemy; SQLite by default, PostgreSQL for a team), and ``python -m afbench.history
import | list | report | check`` over it (docs/history.md).

:func:`record_experiment` is the one call the experiment makes when it ends. A database that
cannot be reached, or a directory that cannot be read, is a warning: the experiment's result
and exit code never depend on the history.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def record_experiment(out_dir: Path, url: str | None = None, enabled: bool = True) -> bool:
    """Record the finished experiment in ``out_dir`` in the history database at ``url``
    (``history.url``; None: ``$AFBENCH_HISTORY_URL`` or the per-user SQLite file, see
    :func:`afbench.history.db.resolve_url`). Returns whether a new record was written
    (False when disabled, already recorded, or on a warning). Never raises."""
    if not enabled:
        return False
    try:
        from afbench.history.db import open_db, resolve_url, shown
        from afbench.history.records import extract, write
        from afbench.store import OutDir

        ex = extract(OutDir(Path(out_dir)), source="live")
        engine = open_db(url)
        try:
            written = write(engine, ex)
        finally:
            engine.dispose()
    except Exception as exc:  # the experiment is done and its directory intact: only warn
        if getattr(exc, "repeated", False):
            return False  # a server that did not answer: said once already (open_db)
        log.warning(
            "afbench: history: %s was not recorded: %s",
            out_dir,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        return False
    if written:
        log.info(
            "afbench: history: recorded %d variant(s) of %s in %s",
            len(ex.variants),
            ex.experiment["experiment"],
            shown(resolve_url(url)),
        )
    return written
