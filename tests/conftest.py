"""Shared fixtures: compose the real Hydra config tree the way `python -m afbench` does."""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from afbench.cli import register

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def private_device_locks(tmp_path_factory):
    """The CPU device lock is machine-wide by default (/tmp): the suite takes its own folder so
    it neither waits for nor blocks other afbench processes on this machine."""
    folder = tmp_path_factory.mktemp("locks")
    old = os.environ.get("AFBENCH_LOCK_DIR")
    os.environ["AFBENCH_LOCK_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("AFBENCH_LOCK_DIR", None)
    else:
        os.environ["AFBENCH_LOCK_DIR"] = old


@pytest.fixture(autouse=True, scope="session")
def no_wait_for_quiet():
    """experiment.wait_for_quiet_s defaults to 0 in the suite (it runs beside other jobs on
    shared machines): the tests of waiting (tests/test_reliability.py) set it themselves."""
    old = os.environ.get("AFBENCH_WAIT_FOR_QUIET_S")
    os.environ["AFBENCH_WAIT_FOR_QUIET_S"] = "0"
    yield
    if old is None:
        os.environ.pop("AFBENCH_WAIT_FOR_QUIET_S", None)
    else:
        os.environ["AFBENCH_WAIT_FOR_QUIET_S"] = old


@pytest.fixture(autouse=True, scope="session")
def private_history(tmp_path_factory):
    """Every experiment records itself in the history database (afbench.history): the suite
    (and the afbench processes it starts) records into its own SQLite file, never the user's."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    old = os.environ.get("AFBENCH_HISTORY_URL")
    os.environ["AFBENCH_HISTORY_URL"] = f"sqlite:///{path}"
    yield path
    if old is None:
        os.environ.pop("AFBENCH_HISTORY_URL", None)
    else:
        os.environ["AFBENCH_HISTORY_URL"] = old


@pytest.fixture(autouse=True)
def private_host_calibration(tmp_path_factory, monkeypatch):
    """Each test gets its own, empty history database, hence its own host calibration
    (afbench.history.calibration): a test's multi-round experiment must not calibrate the next
    test's one-round verdict. Subprocesses inherit the variable."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    monkeypatch.setenv("AFBENCH_HISTORY_URL", f"sqlite:///{path}")
    return path


@pytest.fixture
def compose_cfg():
    """compose_cfg(*overrides) -> DictConfig, as the command line would compose it."""

    def _compose(*overrides: str):
        register()
        GlobalHydra.instance().clear()
        conf_dir = str(importlib.resources.files("afbench.conf"))
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    yield _compose
    GlobalHydra.instance().clear()


@pytest.fixture
def afbench_env(tmp_path):
    """Environment for running `python -m afbench` in a subprocess from tmp_path."""
    env = dict(os.environ)
    env.pop("HYDRA_FULL_ERROR", None)
    return env


@pytest.fixture
def hide_torchtitan(tmp_path, monkeypatch):
    """Child Python processes started from the test cannot import torchtitan (it may be
    installed here, ``.[titan-test]``): a ``sitecustomize`` on PYTHONPATH refuses it."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torchtitan':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(hide))
    return hide
