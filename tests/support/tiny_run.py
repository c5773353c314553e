"""Overrides that shrink `lze-bench train` on the local backend to a run of seconds (tests only).

A 2-layer, 32-wide policy, 64 training prompts, a 3-step warm start and 4 groups of 4
samples a step: every part of a run (warm start, rollouts, update, held-out eval,
checkpoints) still runs for real, only small. Importable because pyproject's pytest
`pythonpath` puts tests/support on sys.path.
"""

TINY_TRAIN = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.num_kv_heads=2",
    "model.intermediate_size=64", "task.num_train=64", "task.num_test=24", "task.num_sft=128",
    "backend.warmstart_steps=3", "backend.warmstart_batch_size=16", "backend.warmstart_warmup=1",
    "backend.eval_size=12", "backend.threads=1", "trainer.batch_size=4", "trainer.n_samples=4",
    "trainer.max_new_tokens=16", "trainer.micro_batch_size=8",
]
