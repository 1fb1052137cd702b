"""Test helper: a host calibration recorded in a test's history database."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from afbench.cli import register


def seed_calibration(
    url: str, *overrides: str, spread_pct: float = 2.0, n_pairs: int = 24, tmp: Path | None = None
) -> str:
    """Record a host calibration fit for one round (``n_pairs`` clean pairs, ``spread_pct``
    run-to-run spread) in the history database at ``url``, for the run kind that
    ``python -m afbench <overrides>`` plans, for every kind its variants run in the verdict
    phase (afbench.history.calibration.verdict_kinds). Returns the baseline's kind."""
    import tempfile

    from afbench.config import validate_config
    from afbench.history import calibration as cal
    from afbench.plan import make_plan
    from afbench.verdict.calibration import RunSpread

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(
        config_dir=str(importlib.resources.files("afbench.conf")), version_base="1.3"
    ):
        conf = validate_config(compose(config_name="config", overrides=list(overrides)))
    GlobalHydra.instance().clear()
    plan = make_plan(conf, Path(tmp or tempfile.mkdtemp()) / "plan")
    kinds = cal.verdict_kinds(plan)
    for kind in sorted(set(kinds.values())):  # every kind its variants run: each calibrated
        assert cal.record(
            kind,
            RunSpread(spread_pct=spread_pct, df=n_pairs - 1, n_pairs=n_pairs),
            "tests/conftest.py",
            cal.AA,
            url,
        )
    return kinds[plan.baseline]


def copy_experiment(src: Path, dst: Path, started: str) -> Path:
    """A copy of the output directory ``src`` at ``dst`` that is another experiment: its
    experiment.json ``created_at`` set to ``started`` (ISO). The history keys an experiment by
    its name, host, start and sweep job, so a plain copy is the same experiment recorded
    once; tests that build a history from one fixture give each copy its own start."""
    import json
    import shutil

    shutil.copytree(src, dst)
    path = dst / "experiment.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "created_at": started}))
    return dst
