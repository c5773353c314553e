"""Benchmark evaluation: `lze-bench eval` and `lze-bench grade`.

Modules: suites.py (the `eval` config group and the `eval` primary config),
generation.py (hf | vllm), metrics.py, runner.py (`run_eval`), grade_file.py.
The benchmark registry (lze_bench/benchmarks.py) and the grading package
(lze_bench/grading/) sit below this package. Kept import-light: nothing here
imports torch.
"""
