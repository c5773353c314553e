"""`python tests/openrlhf_cpu/build_ds_ops.py`: JIT-build DeepSpeed's CPU ops the DeepSpeed tests use (CI, tests only).

tests/test_openrlhf_deepspeed.py runs OpenRLHF's policy actor on DeepSpeed's
CPU accelerator, which compiles two C++ ops on first use: its FusedAdam and the
shared-memory all-reduce (`deepspeed_shm_comm`). Cold, that is a few minutes on
2 cores; the result is cached in TORCH_EXTENSIONS_DIR (default
~/.cache/torch_extensions), where every later process finds it. .ci/run builds
them here first, so the build is timed apart from the test and never happens
inside two test processes at once.
"""

import os
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from deepspeed.accelerator import get_accelerator  # noqa: E402

for name in ("FusedAdamBuilder", "ShareMemCommBuilder"):
    start = time.perf_counter()
    get_accelerator().create_op_builder(name).load()
    print(f"[ci] DeepSpeed CPU op {name}: ready in {time.perf_counter() - start:.0f} s")
