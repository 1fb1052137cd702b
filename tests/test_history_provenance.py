"""afbench.history.provenance: the host fingerprint and the git commit each record carries,
from fixture /proc trees (no GPU or NPU here; bench/device_provenance.py checks a real one)."""

from __future__ import annotations

import subprocess

from afbench.history import provenance as P


def test_cpu_model_reads_x86_and_arm_cpuinfo():
    assert P.cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 9654\n") == "AMD EPYC 9654"
    arm = "processor\t: 0\nCPU implementer\t: 0x48\nCPU architecture: 8\nCPU part\t: 0xd01\n"
    assert P.cpu_model(arm) == "arm 0x48/0xd01"


def test_nvidia_driver_and_gpu_names_come_from_the_kernel_module_files(tmp_path):
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
        (tmp_path / "gpus" / bus / "information").write_text(
            "Model: \t\t NVIDIA H200\nIRQ:   \t\t 155\n"
        )
    assert P.nvidia_info(tmp_path) == ("NVIDIA H200", "550.54.15")
    assert P.nvidia_info(tmp_path / "absent") == (None, None)


def test_ascend_driver_version_and_a_stable_host_id(tmp_path):
    (tmp_path / "version.info").write_text("Version=24.1.rc2\nascendhal_version=7.35.23\n")
    assert P.ascend_driver(tmp_path) == "24.1.rc2"
    host = {
        "hostname": "n1",
        "cpu_model": "Kunpeng-920",
        "accelerator": None,
        "driver": "ascend 24.1.rc2",
    }
    assert P.host_id(host) == P.host_id(dict(host)) != P.host_id({**host, "driver": "ascend 25"})
    assert len(P.host_fingerprint()["host_id"]) == 16


def test_git_commit_of_a_repository_marks_a_dirty_tree(tmp_path):
    assert P.git_commit(tmp_path) is None  # not a repository
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=tmp_path, check=True)
    head = P.git_commit(tmp_path)
    assert head is not None and len(head) == 40
    (tmp_path / "f").write_text("2")
    assert P.git_commit(tmp_path) == head + "+dirty"
