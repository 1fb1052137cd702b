"""One-shot device check of afbench.history.provenance on a GPU/NPU host: loads the module
file alone (standard library only, no afbench install needed), prints the host fingerprint,
and cross-checks it against nvidia-smi / npu-smi when present.

    python3 bench/device_provenance.py
"""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

path = Path(__file__).resolve().parents[1] / "src" / "afbench" / "history" / "provenance.py"
spec = importlib.util.spec_from_file_location("provenance", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
host = mod.host_fingerprint()
print("host_fingerprint:", json.dumps(host, indent=1))
print("git_commit of", Path.cwd(), ":", mod.git_commit())
for cmd in (
    ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
    ["npu-smi", "info"],
):
    if shutil.which(cmd[0]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        print(" ".join(cmd[:2]), "->", out[:500])
        if cmd[0] == "nvidia-smi" and out:
            name, driver = [x.strip() for x in out.splitlines()[0].split(",")]
            ok = (
                host["accelerator"]
                and name in host["accelerator"]
                and host["driver"] == f"nvidia {driver}"
            )
            print("MATCH" if ok else "MISMATCH", f"(nvidia-smi: {name}, {driver})")
            sys.exit(0 if ok else 1)
