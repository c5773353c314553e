"""`python tests/openrlhf_cpu/run_entry.py --lze-config CONFIG -- FLAGS...`: the job's entry with CPU stand-ins.

Exactly `python -m lze_bench.backends.openrlhf.entry --lze-config CONFIG -- FLAGS...`
(the argv a job runs, from the run directory's openrlhf/command.json), except
that the vLLM and DeepSpeed policy engines are replaced by lze_cpu_standins
first (env LZE_TEST_POLICY: "standin", the default, or "deepspeed" for
OpenRLHF's real policy actor on DeepSpeed). tests/stubs (import stubs of
vllm/flash_attn) must be on PYTHONPATH when the real packages are missing;
the test sets that up.
"""

import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lze_cpu_standins.install import install  # noqa: E402

install(os.environ.get("LZE_TEST_POLICY", "standin"))
sys.argv = ["lze_bench.backends.openrlhf.entry", *sys.argv[1:]]
runpy.run_module("lze_bench.backends.openrlhf.entry", run_name="__main__", alter_sys=True)
