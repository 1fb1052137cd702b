"""backend=auto without torch: the resolver's probes (torch_npu / torch installed, /dev/davinci
nodes, the NVIDIA driver, the visibility variables) faked one by one, and the worker refusing
a planned backend that torch cannot use."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import subprocess
import sys

import pytest

from afbench.backends import resolve
from afbench.backends.resolve import detect_backend, resolve_backend

_real_find_spec = importlib.util.find_spec


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine with nothing: no /dev/davinci*, no NVIDIA driver file, no nvidia-smi, a
    CUDA build of torch but no torch_npu. Tests add what they need."""
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(resolve, "DAVINCI_GLOB", str(dev / "davinci[0-9]*"))
    monkeypatch.setattr(resolve, "NVIDIA_DRIVER_FILE", str(tmp_path / "nvidia-version"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    installed = {"torch"}

    def find_spec(name, *args):
        if name in ("torch", "torch_npu"):
            return importlib.machinery.ModuleSpec(name, None) if name in installed else None
        return _real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(
        importlib.metadata, "version", lambda dist: "2.13.0+cu128" if dist == "torch" else "1.0"
    )

    class Machine:
        def install(self, module):
            installed.add(module)

        def uninstall(self, module):
            installed.discard(module)

        def davinci(self):
            (dev / "davinci0").touch()

        def nvidia_driver(self):
            (tmp_path / "nvidia-version").write_text("NVRM version: NVIDIA UNIX x86_64 570.00\n")

        def nvidia_smi(self, output):
            (tmp_path / "bin").mkdir(exist_ok=True)
            exe = tmp_path / "bin" / "nvidia-smi"
            exe.write_text(f"#!/bin/sh\nprintf '{output}'\n")
            exe.chmod(0o755)

    return Machine()


def test_no_device_resolves_to_cpu(machine):
    assert detect_backend() == "cpu"


def test_torch_npu_and_a_davinci_node_resolve_to_npu_before_cuda(machine):
    machine.install("torch_npu")
    machine.davinci()
    machine.nvidia_driver()
    assert detect_backend() == "npu"


def test_a_davinci_node_without_torch_npu_is_not_npu(machine):
    machine.davinci()
    assert detect_backend() == "cpu"


def test_torch_npu_without_a_device_node_is_not_npu(machine):
    machine.install("torch_npu")
    assert detect_backend() == "cpu"


def test_nvidia_driver_and_a_cuda_torch_resolve_to_cuda(machine):
    machine.nvidia_driver()
    assert detect_backend() == "cuda"


def test_nvidia_smi_listing_a_gpu_counts_as_the_driver(machine):
    machine.nvidia_smi("GPU 0: NVIDIA H200 (UUID: GPU-1234)\\n")
    assert detect_backend() == "cuda"


def test_nvidia_smi_listing_no_gpu_is_not_cuda(machine):
    machine.nvidia_smi("No devices found.\\n")
    assert detect_backend() == "cpu"


def test_a_cpu_only_torch_wheel_is_not_cuda(machine, monkeypatch):
    machine.nvidia_driver()
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: "2.13.0+cpu")
    assert detect_backend() == "cpu"


def test_no_torch_is_not_cuda(machine):
    machine.nvidia_driver()
    machine.uninstall("torch")
    assert detect_backend() == "cpu"


@pytest.mark.parametrize("mask", ["", "-1"])
def test_an_empty_cuda_mask_hides_the_gpus(machine, monkeypatch, mask):
    machine.nvidia_driver()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    assert detect_backend() == "cpu"


def test_an_empty_ascend_mask_hides_the_npus(machine, monkeypatch):
    machine.install("torch_npu")
    machine.davinci()
    machine.nvidia_driver()
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "")
    assert detect_backend() == "cuda"


def test_explicit_names_are_kept_and_unknown_ones_rejected(machine):
    assert [resolve_backend(n) for n in ("cpu", "cuda", "npu")] == ["cpu", "cuda", "npu"]
    with pytest.raises(ValueError, match="'tpu' is not one of auto"):
        resolve_backend("tpu")


@pytest.mark.parametrize(
    "module",
    ["afbench.cli", "afbench.plan", "afbench.preflight", "afbench.launch.local", "afbench.worker"],
)
def test_orchestrator_modules_and_resolving_auto_import_no_torch(module):
    code = (
        f"import sys, {module}\n"
        "from afbench.backends.resolve import resolve_backend\n"
        "resolve_backend('auto')\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_worker_fails_a_planned_backend_that_torch_cannot_use(compose_cfg, tmp_path):
    import torch

    from afbench.config import validate_config
    from afbench.engines.registry import ENGINES
    from afbench.errors import RunFailed
    from afbench.plan import make_plan

    if torch.cuda.is_available():
        pytest.skip("this machine has a usable CUDA device")
    spec = make_plan(validate_config(compose_cfg("backend=cuda")), tmp_path / "out").runs[0]
    assert spec.backend == "cuda"
    with pytest.raises(RunFailed, match=r"backend cuda was planned .* sees no CUDA device"):
        ENGINES["builtin"].run(spec, tmp_path)
