"""Benchmark evaluation: `lze-bench eval` and `lze-bench grade`.

Modules: benchmarks.py (BENCHMARKS registry), suites.py (the `eval` config
group and the `eval` primary config), generation.py (hf | vllm), metrics.py,
runner.py (`run_eval`), grade_file.py, pool.py (watchdog process pool used by
lze_bench.grading). Kept import-light: nothing here imports torch.
"""
