"""Device assignment per run, visibility variables for the worker, and per-device locks
(afbench.launch.devices), plus their wiring into the local launcher."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from afbench.config import validate_config
from afbench.config.models import ParallelConfig
from afbench.errors import ConfigError
from afbench.launch.devices import (
    CPU_LOCK_NAME,
    assign_devices,
    device_locks,
    held_devices,
    lock_paths,
    physical_devices,
    run_devices,
    visible_devices_env,
)
from afbench.plan import make_plan

WORKERS = Path(__file__).parent / "fault_workers"


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
    """Locks of these tests live in tmp_path: never wait on (or block) anyone else's runs."""
    folder = tmp_path / "locks"
    monkeypatch.setenv("AFBENCH_LOCK_DIR", str(folder))
    for var in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return folder


def par(world_size: int = 1, devices: list[int] | None = None) -> ParallelConfig:
    return ParallelConfig(world_size=world_size, devices=devices)


# ---------------------------------------------------------------- assignment


def test_cpu_runs_get_no_device_ids_whatever_the_pool():
    assert assign_devices(par(), "cpu", 3, [0, 1]) is None


def test_explicit_parallel_devices_win_over_the_pool():
    assert assign_devices(par(2, [5, 7]), "cuda", 1, [0, 1, 2, 3]) == [5, 7]


def test_without_pool_every_job_gets_the_default_devices():
    assert assign_devices(par(2), "npu", 4, None) is None


@pytest.mark.parametrize(
    "job, expected", [(0, [0]), (1, [1]), (2, [2]), (3, [3]), (4, [0]), (9, [1])]
)
def test_sweep_jobs_take_one_pool_device_each_and_wrap(job, expected):
    assert assign_devices(par(1), "cuda", job, [0, 1, 2, 3]) == expected


@pytest.mark.parametrize("job, expected", [(0, [4, 5]), (1, [6, 7]), (2, [4, 5]), (3, [6, 7])])
def test_sweep_jobs_take_aligned_blocks_of_world_size(job, expected):
    assert assign_devices(par(2), "npu", job, [4, 5, 6, 7]) == expected


def test_pool_not_a_multiple_of_world_size_leaves_the_rest_unused_rather_than_split_a_job():
    got = [assign_devices(par(2), "cuda", job, [0, 1, 2]) for job in range(3)]
    assert got == [[0, 1], [0, 1], [0, 1]]


def test_a_plain_run_with_a_pool_takes_its_first_block():
    assert assign_devices(par(2), "cuda", None, [3, 2, 1, 0]) == [3, 2]


def test_pool_smaller_than_world_size_is_a_config_error_naming_the_key():
    with pytest.raises(
        ConfigError,
        match=r"launcher.device_pool: 1 device\(s\) \[0\] cannot "
        r"hold one run of parallel.world_size 2",
    ):
        assign_devices(par(2), "cuda", 0, [0])


def test_pool_with_duplicates_is_a_config_error():
    with pytest.raises(ConfigError, match="launcher.device_pool: ids must be distinct"):
        assign_devices(par(1), "cuda", 0, [0, 0])


def test_auto_must_be_resolved_before_assignment():
    with pytest.raises(ValueError, match="resolved"):
        assign_devices(par(1), "auto", 0, None)


# ---------------------------------------------------------------- visibility


def test_visibility_variable_per_backend():
    assert visible_devices_env("cuda", [2, 3], {}) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert visible_devices_env("npu", [1], {}) == {"ASCEND_RT_VISIBLE_DEVICES": "1"}
    assert visible_devices_env("cpu", [1], {}) == {}
    assert visible_devices_env("cuda", None, {}) == {}


def test_ids_index_afbenchs_own_mask():
    # afbench started under CUDA_VISIBLE_DEVICES=4,5,6: its device 1 is physical device 5
    parent = {"CUDA_VISIBLE_DEVICES": "4, 5,6"}
    assert visible_devices_env("cuda", [1, 2], parent) == {"CUDA_VISIBLE_DEVICES": "5,6"}
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}
    assert physical_devices("cuda", [1], uuids) == ["GPU-bbb"]
    # the other backend's mask is not this backend's
    assert visible_devices_env("npu", [1], parent) == {"ASCEND_RT_VISIBLE_DEVICES": "1"}


def test_id_beyond_afbenchs_mask_is_a_config_error():
    with pytest.raises(ConfigError, match=r"ASCEND_RT_VISIBLE_DEVICES='0,1'.*2 device\(s\)"):
        physical_devices("npu", [2], {"ASCEND_RT_VISIBLE_DEVICES": "0,1"})


def test_held_devices_are_the_workers_first_world_size_visible_entries():
    assert held_devices("cuda", {"CUDA_VISIBLE_DEVICES": "6,7"}, 2) == ["6", "7"]
    assert held_devices("npu", {}, 2) == ["0", "1"]
    assert held_devices("cpu", {"CUDA_VISIBLE_DEVICES": "6"}, 1) == []


def test_run_devices_prefers_the_plans_assignment_over_the_config():
    cfg = SimpleNamespace(
        backend=SimpleNamespace(name="cuda"), parallel=SimpleNamespace(devices=[0])
    )
    assert run_devices(SimpleNamespace(config=cfg)) == ("cuda", [0])
    planned = SimpleNamespace(config=cfg, backend="npu", devices=[3])
    assert run_devices(planned) == ("npu", [3])
    cpu = SimpleNamespace(
        config=SimpleNamespace(
            backend=SimpleNamespace(name="cpu"), parallel=SimpleNamespace(devices=None)
        )
    )
    assert run_devices(cpu) == ("cpu", None)


# ---------------------------------------------------------------- locks


def test_lock_files_are_per_backend_and_device_sorted_and_one_for_cpu(tmp_path):
    assert [p.name for p in lock_paths("cuda", ["3", "1", "GPU-a/b"], tmp_path)] == [
        "afbench-cuda-1.lock",
        "afbench-cuda-3.lock",
        "afbench-cuda-GPU-a_b.lock",
    ]
    assert [p.name for p in lock_paths("npu", [0], tmp_path)] == ["afbench-npu-0.lock"]
    assert lock_paths("cpu", ["0", "1"], tmp_path) == [tmp_path / CPU_LOCK_NAME]


HOLDER = """
import sys
from afbench.launch.devices import device_locks
with device_locks(sys.argv[1], sys.argv[2].split(","), label="holder run"):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def hold_in_other_process(backend: str, devices: str) -> subprocess.Popen:
    """A second process that holds the locks until a line arrives on its stdin."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, backend, devices],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()
    proc.wait(timeout=30)


def acquire_in_thread(backend: str, devices: list[str]) -> tuple[threading.Event, threading.Event]:
    got, done = threading.Event(), threading.Event()

    def run():
        with device_locks(backend, devices, label="waiting run"):
            got.set()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return got, done


def test_two_processes_cannot_hold_the_same_device_lock_at_once(caplog):
    holder = hold_in_other_process("npu", "1")
    try:
        with caplog.at_level(logging.WARNING, logger="afbench.launch.devices"):
            got, done = acquire_in_thread("npu", ["1"])
            assert not got.wait(1.0), "took a device lock another process holds"
            assert f"held by pid {holder.pid}" in caplog.text and "holder run" in caplog.text
            release(holder)
            assert got.wait(10) and done.wait(10)
        assert "got device lock" in caplog.text
    finally:
        if holder.poll() is None:
            holder.kill()


def test_other_devices_and_other_backends_do_not_wait():
    holder = hold_in_other_process("cuda", "0")
    try:
        for backend, devices in (("cuda", ["1"]), ("npu", ["0"])):
            got, done = acquire_in_thread(backend, devices)
            assert got.wait(10) and done.wait(10), (backend, devices)
    finally:
        release(holder)


def test_a_run_waits_while_any_of_its_devices_is_held():
    holder = hold_in_other_process("cuda", "2")
    try:
        got, _ = acquire_in_thread("cuda", ["1", "2"])
        assert not got.wait(1.0)
    finally:
        release(holder)
    assert got.wait(10)


def test_cpu_runs_share_one_lock_across_processes():
    holder = hold_in_other_process("cpu", "")
    try:
        got, _ = acquire_in_thread("cpu", [])
        assert not got.wait(1.0)
    finally:
        release(holder)
    assert got.wait(10)


def test_lock_of_a_killed_process_is_free_at_once():
    holder = hold_in_other_process("cuda", "0")
    holder.kill()
    holder.wait(timeout=30)
    got, _ = acquire_in_thread("cuda", ["0"])
    assert got.wait(10)


def test_lock_is_released_when_the_block_raises(private_locks):
    with pytest.raises(RuntimeError), device_locks("npu", ["0"]):
        raise RuntimeError("run failed")
    got, _ = acquire_in_thread("npu", ["0"])
    assert got.wait(10)


def test_lock_files_can_be_shared_by_other_users_despite_a_strict_umask(private_locks):
    old = os.umask(0o077)
    try:
        with device_locks("cuda", ["0"]) as paths:
            pass
    finally:
        os.umask(old)
    assert paths == [private_locks / "afbench-cuda-0.lock"]
    assert paths[0].stat().st_mode & 0o777 == 0o666


# ---------------------------------------------------------------- the launcher


def spec_of(compose_cfg, tmp_path, *overrides):
    conf = validate_config(compose_cfg(*overrides))
    return make_plan(conf, tmp_path / "out").runs[0]


def test_worker_env_restricts_the_worker_to_the_runs_devices(compose_cfg, tmp_path, monkeypatch):
    from afbench.launch.local import worker_env

    spec = spec_of(
        compose_cfg,
        tmp_path,
        "backend=cuda",
        "parallel.devices=[2]",
        "+launcher.env.CUDA_VISIBLE_DEVICES='0'",
        "+launcher.env.USER_X='1'",
    )
    run_dir = tmp_path / "run"
    env = worker_env(spec, run_dir)
    # launcher.env reaches the worker, but cannot move it off the device it is locked on
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["USER_X"] == "1"
    assert "ASCEND_RT_VISIBLE_DEVICES" not in env
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert worker_env(spec, run_dir)["CUDA_VISIBLE_DEVICES"] == "6"


def test_worker_env_on_cpu_sets_no_visibility(compose_cfg, tmp_path):
    from afbench.launch.local import worker_env

    env = worker_env(spec_of(compose_cfg, tmp_path, "backend=cpu"), tmp_path / "run")
    assert "CUDA_VISIBLE_DEVICES" not in env and "ASCEND_RT_VISIBLE_DEVICES" not in env


def test_launch_run_waits_for_the_cpu_lock_and_times_only_the_run(compose_cfg, tmp_path):
    from afbench.launch.local import launch_run

    spec = spec_of(
        compose_cfg,
        tmp_path,
        "backend=cpu",
        "engine=command",
        f"engine.executable={sys.executable}",
        f"engine.args=[{WORKERS / 'good.py'},'{{steps}}']",
        "scheduler.steps=6",
        "scheduler.measure.first_step=3",
        "scheduler.measure.last_step=6",
        "launcher.timeout_s=120",
    )
    holder = hold_in_other_process("cpu", "")
    timer = threading.Timer(2.0, release, args=(holder,))
    timer.start()
    try:
        t0 = time.monotonic()
        status = launch_run(spec)
        waited = time.monotonic() - t0
    finally:
        timer.join()
        if holder.poll() is None:
            holder.kill()
    assert status.status == "OK", status
    assert waited >= 2.0
    assert status.wall_s < waited - 1.5  # the wait for the lock is not the run's wall time


def test_launch_run_records_a_device_problem_as_a_failed_run(compose_cfg, tmp_path, monkeypatch):
    from afbench.launch.local import launch_run

    spec = spec_of(compose_cfg, tmp_path, "backend=npu", "parallel.devices=[3]")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        monkeypatch.delenv(var, raising=False)
    status = launch_run(spec)
    assert status.status == "FAILED" and status.exit_code is None
    assert "device id(s) [3]" in status.reason.text
    assert (Path(spec.run_dir) / "status.json").is_file()
