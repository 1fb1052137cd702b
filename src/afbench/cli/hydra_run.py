"""The one place afbench calls Hydra's private internals: a plain single run composed once.

``hydra.main`` composes a run three times before the task starts (afbench's precheck, then
Hydra's ``get_mode`` and ``run``: about 0.25 s each; bench/README.md §1). :func:`run_once`
composes it once (``Hydra.compose_config`` with ``run_mode=RUN``), lets the caller check the
config before anything is written, then runs the steps of ``hydra._internal.hydra.Hydra.run``
of hydra-core 1.3: job logging, callbacks, ``run_job`` (output directory, ``.hydra/``, the task).

Supported hydra-core versions: :data:`SUPPORTED_HYDRA` (``tests/test_startup.py`` pins them
and checks every private name used here still exists). On any other version
:func:`supported` is False and afbench takes Hydra's public path (``hydra.main``), about 0.5 s
slower per command and otherwise the same.
"""

from __future__ import annotations

from typing import Any, Callable

import hydra
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import DictConfig

#: hydra-core minor versions whose ``Hydra.run`` this module reproduces
SUPPORTED_HYDRA = ("1.3",)


def supported(version: str = hydra.__version__) -> bool:
    """Whether ``version`` of hydra-core is one :func:`run_once` was written against."""
    return ".".join(version.split(".")[:2]) in SUPPORTED_HYDRA


def run_once(
    overrides: list[str],
    conf_dir: str,
    check: Callable[[DictConfig], None],
    task: Callable[[DictConfig], Any],
) -> None:
    """Compose ``overrides`` once (run mode, Hydra's ``hydra`` node included), call
    ``check(cfg)`` (which exits on a bad config: nothing is written then), then run ``task``
    as Hydra's ``run`` would: output directory, ``.hydra/``, job logging, callbacks. An
    unexpected exception of the task is reported Hydra's way (short; HYDRA_FULL_ERROR=1: all).
    """
    # private: hydra-core 1.3's Hydra.run, step by step (SUPPORTED_HYDRA)
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.utils import run_and_report
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext

    GlobalHydra.instance().clear()
    try:
        # job_name "cli": the name hydra.main gives (the task's module), so cli.log keeps it
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3", job_name="cli"):
            gh = GlobalHydra.instance()
            assert gh.hydra is not None
            cfg = gh.hydra.compose_config(
                config_name="config",
                overrides=[*overrides, "hydra.mode=RUN"],
                run_mode=RunMode.RUN,
                with_log_configuration=False,
            )
            check(cfg)

            def job() -> None:
                configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
                callbacks = Callbacks(cfg)
                callbacks.on_run_start(config=cfg, config_name="config")
                ret = run_job(
                    hydra_context=HydraContext(
                        config_loader=gh.config_loader(), callbacks=callbacks
                    ),
                    task_function=task,
                    config=cfg,
                    job_dir_key="hydra.run.dir",
                    job_subdir_key=None,
                    configure_logging=True,
                )
                callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
                _ = ret.return_value  # re-raises an exception of the task, as Hydra.run does

            run_and_report(job)
    finally:
        GlobalHydra.instance().clear()
