"""Benchmark evaluation: `lze-bench eval` and `lze-bench grade`.

Modules: suites.py (the `eval` config group and the `eval` primary config),
settings.py (the settings key a result is filed under), generation.py
(`load_generator`: hf_generator.py | vllm_generator.py, what they share in
generator_base.py), replicas.py (data-parallel replicas), metrics.py (avg@n,
pass@k, maj@k, intervals, seed spread), outputs.py (result files, evals.parquet rows,
"finished"), seeds.py (eval.seeds aggregates), runner.py (`run_eval`),
grade_file.py.
`eval sweep_dir=` submits jobs from lze_bench/sweep/evals.py, above this package.
The benchmark registry (lze_bench/benchmarks.py) and the grading package
(lze_bench/grading/) sit below this package. Kept import-light: nothing here
imports torch.
"""
