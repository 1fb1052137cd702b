"""afbench's step_trace_time.csv from torch.profiler events counts each step once on CUDA,
where torch.profiler reports a step both as a CPU user annotation and as a GPU
``gpu_user_annotation`` of the same name (issue 10, item 8)."""

from __future__ import annotations

from types import SimpleNamespace

from torch.autograd import DeviceType

from afbench.switches.step_profiler import step_trace_from_events


def ev(name, start, end, device=DeviceType.CPU, parent=None):
    return SimpleNamespace(
        name=name,
        time_range=SimpleNamespace(start=start, end=end),
        device_type=device,
        cpu_parent=parent,
    )


def cuda_events():
    out = []
    for k in range(2):
        t0 = k * 2000
        host = ev(f"ProfilerStep#{5 + k}", t0, t0 + 1000)
        out += [
            host,
            ev(f"ProfilerStep#{5 + k}", t0 + 100, t0 + 1100, DeviceType.CUDA),
            ev("aten::mm", t0 + 10, t0 + 60, parent=host),
            ev("ampere_sgemm_128x64_tn", t0 + 200, t0 + 700, DeviceType.CUDA),
        ]
    return out


def test_cuda_step_appearing_on_host_and_device_is_one_row():
    table = step_trace_from_events(cuda_events(), "cuda:0", 5, device_kernels=True)
    assert table["Step"].tolist() == [5, 6]
    assert table["Stage"].tolist() == [1000, 1000]
    # device kernel time inside the host span
    assert table["Computing"].tolist() == [500, 500]


def test_cpu_profile_steps_and_top_level_ops():
    events = [e for e in cuda_events() if e.device_type == DeviceType.CPU]
    table = step_trace_from_events(events, "cpu", 5)
    assert table["Step"].tolist() == [5, 6]
    assert table["Computing"].tolist() == [50, 50]
