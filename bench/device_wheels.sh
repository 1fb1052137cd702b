#!/usr/bin/env bash
# Download the wheels afbench needs on a lent GPU machine that has no package index (its image
# holds torch, transformers, pandas, jinja2, matplotlib, scipy, rich, pytest, but not Hydra,
# OmegaConf or pydantic): into .whl/ (git-ignored through .git/info/exclude), for CPython 3.12
# on x86_64. bench/device_check.sh installs them with --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do platforms+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl \
  "hydra-core==1.3.8" "omegaconf==2.3.1" \
  "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5" \
  "typing-extensions==4.16.0"
# antlr4-python3-runtime 4.9.3 (the version OmegaConf pins) is published as a source archive only:
# build its pure-Python wheel here.
python3 -m pip wheel -q --no-deps -w .whl "antlr4-python3-runtime==4.9.3"
ls -l .whl
