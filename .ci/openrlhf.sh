#!/usr/bin/env bash
# OpenRLHF 0.11.2 on CPU, for tests/test_openrlhf_hooks.py and tests/test_openrlhf_e2e.py (openrlhf.md §11).
# - openrlhf itself with --no-deps: its pins flash-attn==2.8.3 (CUDA build) and
#   transformers==5.15.0 (would replace the installed 5.x) are not installed; vllm and
#   flash_attn are replaced by tests/stubs in those test files only.
# - deepspeed 0.19.6 has no wheel: built from source with DS_BUILD_OPS=0 (no CUDA ops).
# - torch is held at 2.13.0 by a constraint so pip can never swap it for a CUDA build.
# About a minute on a fresh machine (downloads + the deepspeed build).
set -euo pipefail
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" > "$constraints"
pip_install() { python3 -m pip install -q -c "$constraints" "$@"; }
pip_install --no-deps openrlhf==0.11.2
pip_install 'ray==2.55.0' torchdata jsonlines einops peft accelerate pylatexenc datasets pillow aiohttp \
  hjson ninja py-cpuinfo msgpack nvidia-ml-py pydantic
DS_BUILD_OPS=0 pip_install --no-build-isolation --no-deps deepspeed==0.19.6
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
python3 -c "import openrlhf, ray, deepspeed; print('[ci] openrlhf', openrlhf.__file__.split('/')[-3], 'ray', ray.__version__, 'deepspeed', deepspeed.__version__)"
