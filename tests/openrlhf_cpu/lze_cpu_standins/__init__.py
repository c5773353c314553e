"""CPU stand-ins for the two OpenRLHF 0.11.2 engines that have no CPU build (tests only).

`tests/test_openrlhf_e2e.py` runs lze-bench's OpenRLHF entry point with the real
OpenRLHF controller (trainer `fit`, samples generator, experience maker, agent
executor, checkpoint resume). Only these two pieces are replaced:

* engine.py  `CpuRolloutActor`: a subclass of OpenRLHF's `RolloutRayActor`
  whose `generate` samples with `transformers` instead of vLLM; OpenRLHF's own
  `SingleTurnAgentExecutor` still builds the response and calls our
  reward_func file, so `generate_responses` returns exactly what vLLM's does.
* policy.py  `CpuPolicyActor`: the policy actor without DeepSpeed: OpenRLHF's
  `Actor` (log-probs), `NaiveReplayBuffer` (micro-batches) and `PolicyLoss`,
  with a torch Adam step on CPU, so the weights really change; checkpoints in
  DeepSpeed's layout (`_actor/latest` + `_actor/<tag>/`) plus the HF directory.

install.py swaps them into OpenRLHF's launcher module attributes; the wrapper
`tests/openrlhf_cpu/run_entry.py` calls it, then runs
`lze_bench.backends.openrlhf.entry` as `__main__` with the job's argv. Nothing
here is imported by lze_bench.
"""
