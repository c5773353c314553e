"""Run lze-bench's OpenRLHF driver with the CPU stand-ins installed first (tests only). Two forms:

    python tests/openrlhf_cpu/run_entry.py --lze-config CONFIG -- FLAGS...
    python tests/openrlhf_cpu/run_entry.py PYTHON -m lze_bench.backends.openrlhf.entry --lze-config CONFIG -- FLAGS...

The first is `python -m lze_bench.backends.openrlhf.entry --lze-config CONFIG
-- FLAGS...` (the argv a job runs, from the run directory's
openrlhf/command.json) with its head cut off; the second is that whole
command, which is what `backend.driver_wrapper=[PYTHON,.../run_entry.py]`
makes of it, so `lze-bench train` and `lze-bench sweep` run the stand-ins
unchanged. Either way the entry module then runs as `__main__`, after the
vLLM and DeepSpeed policy engines were replaced by lze_cpu_standins (env
LZE_TEST_POLICY: "standin", the default, or "deepspeed" for OpenRLHF's real
policy actor on DeepSpeed; env LZE_TEST_ENGINE: "standin", the default, or
"vllm" for OpenRLHF's own engines on vLLM's CPU build). tests/stubs (import stubs of vllm/flash_attn)
must be on PYTHONPATH when the real packages are missing; the test sets that up.

A third form runs OpenRLHF's own CLI with the same stand-ins, for `lze-bench bench overhead` (plain OpenRLHF
against lze-bench with the same flags):

    python tests/openrlhf_cpu/run_entry.py PYTHON -m openrlhf.cli.train_ppo_ray FLAGS...
"""

import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lze_cpu_standins.install import install  # noqa: E402

ENTRY = "lze_bench.backends.openrlhf.entry"
OPENRLHF_CLI = "openrlhf.cli.train_ppo_ray"

args = sys.argv[1:]
module = ENTRY
for name in (ENTRY, OPENRLHF_CLI):
    if name in args and args[args.index(name) - 1] == "-m":  # the whole driver command: drop PYTHON -m MODULE
        module, args = name, args[args.index(name) + 1:]
install(os.environ.get("LZE_TEST_POLICY", "standin"), os.environ.get("LZE_TEST_ENGINE", "standin"))
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
