"""A training command on an Ascend NPU, replayed: prints the reference's step lines (planted
times, af_on 10% faster) and, in profile mode, writes the torch_npu profile folder
tests/fixtures/npu_profiles/<$NPU_PROFILE_FORMAT>/<variant>/ into the profile dir, as
torch_npu's tensorboard_trace_handler lays it out.

argv: steps mode profile_dir variant"""

import os
import shutil
import sys
from pathlib import Path

steps, mode, profile_dir, variant = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
fixture = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "npu_profiles"
    / os.environ["NPU_PROFILE_FORMAT"]
    / variant
)
base = 0.30 if variant == "af_off" else 0.27
for step in range(1, steps + 1):
    print(
        f"step: {step}  loss: {2.0 - 0.01 * step:.5f}  "
        f"elapsed_time_per_step: {base + 0.001 * (step % 3):.4f}s",
        flush=True,
    )
if mode == "profile":
    shutil.copytree(fixture, profile_dir, dirs_exist_ok=True)
