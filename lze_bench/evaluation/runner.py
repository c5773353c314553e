"""`lze-bench eval`: generate, grade and score every benchmark of a suite.

    lze-bench eval model=PATH_OR_HF_ID eval=math_suite     one checkpoint
    lze-bench eval run=RUN_DIR eval=math_suite             every complete checkpoint of a run (+ its initial policy)
    lze-bench eval sweep_dir=SWEEP_DIR eval=math_suite         every run of a sweep, as jobs (lze_bench/sweep/evals.py)

Order of one command: compose and check the config; find the targets; load
and check every benchmark's rows (so a missing or malformed file fails before
any model loads); then per target (checkpoint): skip it if every benchmark is
already finished with these settings, else load the generator, evaluate each
unfinished benchmark, write its files and append the run's evals.parquet
rows. A vLLM engine stays up for the next checkpoint when it has the same
architecture and tokenizer, and reloads its weights in place (engines.py);
otherwise it is shut down before the next one starts (generator.close).
Outputs and the "finished" rule: outputs.py; the settings key: settings.py.
One Grader (process pool) serves the whole command.

With `generation.data_parallel_size=D > 1`, D replicas evaluate different
checkpoints at once (replicas.py).

Choices where the sources are silent:
- a run's *initial policy* is evaluated as checkpoint `initial`, step 0 (0
  FLOPs), so reports have each benchmark's accuracy before training (Table 2's
  a0): the policy the run started from, read from its config.yaml
  (`warmstart.dir` on the local backend, else `model.path`); skipped when the
  run has a `step_000000` checkpoint (the same policy), when `initial=false`,
  or with a warning when the config names none;
- each benchmark's sampling seed is derived from (seed, benchmark name), so a
  benchmark's samples do not depend on which other benchmarks ran before it;
- with `eval.seeds=[...]` a checkpoint's engine loads once for all its seeds
  (each seed one settings key, evaluated and skipped on its own); the seed
  aggregate (seeds.py) is written once every seed of the checkpoint is done,
  and the printed table shows it (mean ± std over seeds, per-seed values).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.evaluation.outputs import (append_to_run, finished, print_summary, read_summary, results_dir,
                                          write_samples, write_summary)
from lze_bench.evaluation.settings import seed_settings, settings_key
from lze_bench.fingerprint import fingerprint
from lze_bench.rundir import CONFIG, EVALS, list_checkpoints

logger = logging.getLogger(__name__)

INITIAL = "initial"  # checkpoint name of a run's initial policy (step 0)


@dataclass(frozen=True)
class Target:
    step: int | None  # training step of a run's checkpoint (0 = initial policy); None for model=PATH
    checkpoint: str  # checkpoint directory name, "initial", or the model path / hub id
    path: str
    out_dir: Path  # the checkpoint's output folder; results go to out_dir/<settings key>/


def run_eval(cfg, show: bool = True) -> list[dict]:
    """Evaluate; returns one summary entry per (checkpoint, seed, benchmark), seeds in eval.seeds order.

    show=False (library callers, sweep jobs) hides the progress bars and the final table.
    """
    from lze_bench.config import to_objects

    options = to_objects(cfg)
    if options.sweep_dir:
        raise LzeBenchError("sweep_dir=DIR is a job submission: run it with `lze-bench eval sweep_dir=DIR ...`")
    targets = find_targets(options)
    per_seed = seed_settings(options)  # one settings dict (and key) per sampling seed
    if options.run:
        from lze_bench.ledger import read_evals

        read_evals(options.run)  # an evals.parquet from an older lze-bench fails here, before any work
    data = load_suite(options, per_seed[0])
    if options.generation.data_parallel_size > 1 and len(targets) > 1:
        from lze_bench.evaluation.replicas import run_replicas

        entries = run_replicas(evaluate_targets, options, per_seed, data, targets)
    else:
        entries = evaluate_targets(targets, options, per_seed, data, show)
    if show:
        _show(entries, targets, options, per_seed)
    return entries


def _show(entries: list[dict], targets: list[Target], options, per_seed: list[dict]) -> None:
    """The table of results: per seed with one seed, else the seed aggregates (seeds.py) read back."""
    if len(per_seed) == 1:
        print_summary(entries, [results_dir(t.out_dir, settings_key(per_seed[0])) for t in targets])
        return
    from lze_bench.evaluation.seeds import seeds_dir

    folders = [seeds_dir(t.out_dir, per_seed) for t in targets]
    aggregates = [read_summary(folder)[name] for folder in folders for name in options.eval.benchmarks]
    print_summary(aggregates, folders)


def find_targets(options) -> list[Target]:
    if options.run:
        return run_targets(Path(options.run), options)
    if not options.model.path:
        raise LzeBenchError("nothing to evaluate: pass model=PATH_OR_HF_ID (a checkpoint or hub id), run=RUN_DIR "
                            "or sweep_dir=SWEEP_DIR")
    path = options.model.path
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.strip("/"))[-80:] or "model"
    out = Path(options.out_dir) if options.out_dir else Path("runs") / "eval" / tag
    return [Target(None, path, path, out)]


def run_targets(run: Path, options) -> list[Target]:
    """The run's initial policy (see the module docstring) and complete checkpoints, oldest first,
    restricted to `options.checkpoints` when given (a name the run lacks is refused, naming what it has)."""
    targets = all_run_targets(run, options)
    if options.checkpoints is None:
        return targets
    chosen, unknown = choose_checkpoints(targets, options.checkpoints)
    if unknown:
        raise LzeBenchError(f"checkpoints: {', '.join(unknown)} not in run {str(run)!r} "
                            f"(it has: {', '.join(t.checkpoint for t in targets)})")
    return chosen


def choose_checkpoints(targets: list[Target], names) -> tuple[list[Target], list[str]]:
    """(the targets named, in the order given; the names no target has)."""
    known = {t.checkpoint: t for t in targets}
    return [known[name] for name in names if name in known], [name for name in names if name not in known]


def all_run_targets(run: Path, options) -> list[Target]:
    """Every target of a run: its initial policy (unless `initial=false` or it has step_000000) and each
    complete checkpoint, oldest first."""
    if not run.is_dir():
        raise LzeBenchError(f"run={str(run)!r} is not a directory")
    found = list_checkpoints(run)
    if not found:
        raise LzeBenchError(f"run {str(run)!r} has no complete checkpoint (checkpoints/step_*/COMPLETE)")
    root = Path(options.out_dir) if options.out_dir else run / EVALS
    targets = [Target(step, path.name, str(path), root / path.name) for step, path in found]
    if options.initial and found[0][0] != 0:
        policy = initial_policy(run)
        if policy is None:
            logger.warning("%s: its config.yaml names no initial policy (warmstart.dir or model.path); "
                           "not evaluated, so reports have no accuracy before training for it", run)
        else:
            targets.insert(0, Target(0, INITIAL, policy, root / INITIAL))
    return targets


def initial_policy(run: Path) -> str | None:
    """The policy a run started from, from its config.yaml: the local backend's warm-start directory,
    else `model.path` (a hub id or directory); None when neither is recorded."""
    import yaml

    path = run / CONFIG
    if not path.exists():
        return None
    cfg = yaml.safe_load(path.read_text()) or {}
    warm = cfg.get("warmstart")
    if isinstance(warm, dict) and warm.get("dir"):
        return str(warm["dir"])
    model = cfg.get("model") or {}
    return str(model["path"]) if isinstance(model, dict) and model.get("path") else None


def load_suite(options, settings: dict) -> dict[str, list[dict]]:
    """Benchmark name -> its checked rows (first `limit`), loaded before any model."""
    from lze_bench.data import load_benchmark

    return {name: load_benchmark(name, root=options.data.root, split=options.eval.split, limit=settings["limit"] or None)
            for name in options.eval.benchmarks}


def evaluate_targets(targets: list[Target], options, per_seed: list[dict], data: dict, show: bool) -> list[dict]:
    from lze_bench.grading import Grader

    from lze_bench.evaluation.engines import EngineSlot
    from lze_bench.evaluation.generation import load_generator

    def load(path: str):
        return load_generator(path, backend=options.generation.backend, device=options.device,
                              dtype=options.generation.dtype, batch_size=options.generation.batch_size,
                              use_chat_template=options.eval.use_chat_template, seed=per_seed[0]["seed"],
                              engine=options.generation)

    entries: list[dict] = []
    grading = options.grading
    slot = EngineSlot(load)
    with Grader(timeout_s=grading.timeout_s, workers=grading.workers, mode=options.eval.grading) as grader, \
            _progress(show) as progress:
        try:
            for target in targets:
                # one process per results folder: two evals of the same checkpoint and settings would race on its
                # files
                with _hold_results(target, per_seed):
                    done = evaluate_target(target, options, per_seed, data, grader, progress, slot)
                entries += done
                if options.run:
                    append_to_run(Path(options.run), target.step, target.checkpoint, done)
        finally:
            slot.close()
    if slot.reloads:
        line = f"{slot.starts} engine start(s), {slot.reloads} weight reload(s) for {len(targets)} checkpoint(s)"
        logger.info(line)
        if show:
            print(line, file=sys.stderr)
    return entries


@contextlib.contextmanager
def _hold_results(target: Target, per_seed: list[dict]):
    """The run-dir lock of every seed's results folder of one checkpoint (runlock.py), held together."""
    from lze_bench.runlock import hold_run_dir

    with contextlib.ExitStack() as stack:
        for settings in per_seed:
            key = settings_key(settings)
            stack.enter_context(hold_run_dir(results_dir(target.out_dir, key), "eval", key="",
                                             name=f"the results of {target.checkpoint} under settings {key}"))
        yield


def evaluate_target(target: Target, options, per_seed: list[dict], data: dict, grader, progress, slot) -> list[dict]:
    """Every seed x benchmark of one checkpoint not finished yet, with one engine (`slot`'s: a vLLM engine of the
    previous checkpoint with the same architecture and tokenizer reloads this one's weights, engines.py); returns
    every entry (seed-major) and, with several seeds, writes their aggregate (seeds.py)."""
    names = list(options.eval.benchmarks)
    folders = {settings_key(s): results_dir(target.out_dir, settings_key(s)) for s in per_seed}
    summaries = {key: read_summary(folder) for key, folder in folders.items()}
    todo = {key: [name for name in names if not finished(folders[key], name, key, summaries[key])] for key in folders}
    for key, folder in folders.items():
        for name in set(names) - set(todo[key]):
            check_same_rows(folder, name, summaries[key][name], data[name])
    for key, folder in folders.items():
        skipped = [name for name in names if name not in todo[key]]
        if skipped:
            logger.info("%s: already evaluated with settings %s: %s", target.checkpoint, key, ", ".join(skipped))
    if any(todo.values()):
        generator = slot.get(target.path)
        try:
            check_answer_room(generator, {name: data[name] for key in todo for name in todo[key]}, options.eval,
                              target.checkpoint)
            for settings in per_seed:
                key = settings_key(settings)
                for name in todo[key]:
                    entry = evaluate_benchmark(name, data[name], target, folders[key], generator, options, settings,
                                               grader, progress)
                    summaries[key][name] = {**entry, "settings_key": key}
                    write_summary(folders[key], summaries[key])
        except BaseException:
            slot.close()  # a failed checkpoint leaves no engine behind for the next one
            raise
        slot.release()
    entries = [summaries[settings_key(s)][name] for s in per_seed for name in names]
    if len(per_seed) > 1:
        from lze_bench.evaluation.seeds import aggregate_target

        aggregate_target(target.out_dir, per_seed, names, entries)
    return entries


def evaluate_benchmark(name: str, rows: list[dict], target: Target, folder: Path, generator, options, settings: dict,
                       grader, progress) -> dict:
    from lze_bench.evaluation.generation import Sampling
    from lze_bench.evaluation.metrics import summarize

    suite = options.eval
    messages = benchmark_messages(name, rows, suite)
    seed = settings["seed"] * 1_000_003 + zlib.crc32(name.encode())  # per benchmark: resumable and independent
    sampling = Sampling(suite.n_samples, suite.temperature, suite.top_p, suite.max_new_tokens, seed % 2**31)
    label = f"{target.checkpoint[-40:]} {name}" + (f" seed {settings['seed']}" if suite.seeds else "")
    task = progress.add_task(label, total=len(rows))
    tokens_before, time_before = generator.generated_tokens, generator.generate_s
    results = generator.generate(messages, sampling, progress=lambda done: progress.advance(task, done))
    started = time.perf_counter()
    responses = [c.text for result in results for c in result.completions]
    golds = [row["answer"] for row in rows for _ in range(suite.n_samples)]
    grades = grader.grade(responses, golds)
    grade_s = time.perf_counter() - started
    correct = np.array([g.correct for g in grades], dtype=bool).reshape(len(rows), suite.n_samples)
    answers = [[g.extracted for g in grades[i * suite.n_samples : (i + 1) * suite.n_samples]] for i in range(len(rows))]
    write_samples(folder / f"{name}.jsonl", name, rows, results, grades)
    generated = generator.generated_tokens - tokens_before
    generate_s = generator.generate_s - time_before
    statuses = [g.status for g in grades]
    cut = cut_shares(results)
    warn_if_cut(target.checkpoint, name, cut, suite.max_new_tokens)
    return {
        "benchmark": name, "checkpoint": target.checkpoint, "step": target.step, "model": target.path,
        "suite": suite.name, **summarize(correct, answers, suite.ks),
        "generated_tokens": generated, "generate_s": generate_s,
        "tokens_per_s": generated / generate_s if generate_s > 0 else None, "grade_s": grade_s,
        "grade_timeouts": statuses.count("timeout"), "grade_errors": statuses.count("error"),
        "no_answer": statuses.count("no_answer"), "truncated_prompts": sum(r.truncated for r in results),
        "max_new_tokens_used": min((r.max_new_tokens for r in results), default=None), **cut,
        "generation_backend": generator.name, "device": getattr(generator, "device", options.device),
        "settings": settings, "grading_timeout_s": options.grading.timeout_s,
        # the dtype that ran (generation.dtype=auto differs between engines: bfloat16 on vLLM's CPU build,
        # float32 in transformers on CPU), and what was asked for
        "dtype": getattr(generator, "dtype", options.generation.dtype), "dtype_requested": options.generation.dtype,
        "data": fingerprint(rows),
    }


def check_same_rows(folder: Path, name: str, entry: dict, rows: list[dict]) -> None:
    """A finished result is reused only for the rows it was computed on (its `data` fingerprint): a benchmark
    file replaced since would otherwise be reported with the old file's accuracy. Results from before the
    fingerprint was recorded are reused as they are."""
    from lze_bench.evaluation.outputs import SUMMARY

    was, now = entry.get("data"), fingerprint(rows)
    if isinstance(was, dict) and (was.get("rows"), was.get("sha256")) != (now["rows"], now["sha256"]):
        raise LzeBenchError(
            f"{Path(folder) / SUMMARY}: {name} was evaluated on {was.get('rows')} rows (sha256 "
            f"{str(was.get('sha256'))[:12]}) and its data now gives {now['rows']} (sha256 {now['sha256'][:12]}); "
            f"restore the benchmark file it was evaluated on, or move {folder} away to evaluate it again")


def benchmark_messages(name: str, rows: list[dict], suite) -> list:
    """The prompt (a user message or chat turns) of each row, under the suite's prompt convention."""
    from lze_bench.data import get_spec

    spec = get_spec(name)
    return [spec.messages(row["problem"], suite.prompt_template, suite.prompt) for row in rows]


def cut_shares(results) -> dict:
    """Shares of responses that stopped at the token budget (finish "length": the answer may be missing only
    because it was cut) and of prompts truncated from the left to fit the context (generator_base.py)."""
    finishes = [c.finish for r in results for c in r.completions]
    return {"cut_response_frac": finishes.count("length") / len(finishes) if finishes else 0.0,
            "cut_prompt_frac": sum(r.truncated for r in results) / len(results) if results else 0.0}


def warn_if_cut(checkpoint: str, name: str, cut: dict, max_new_tokens: int) -> None:
    from lze_bench.evaluation.outputs import CUT_WARNING

    if max(cut.values()) > CUT_WARNING:
        logger.warning("%s %s: %.1f%% of responses stopped at max_new_tokens (%d) and %.1f%% of prompts were "
                       "truncated to fit the context; cut answers count as wrong (raise eval.max_new_tokens, or "
                       "use a model with a longer context)", checkpoint, name, 100 * cut["cut_response_frac"],
                       max_new_tokens, 100 * cut["cut_prompt_frac"])


def check_answer_room(generator, data: dict[str, list[dict]], suite, checkpoint: str) -> None:
    """Refuse, before anything is generated, a prompt that leaves fewer than `eval.min_answer_tokens` (at most
    eval.max_new_tokens) of the model's context for the answer: truncating it from the left, or answering in a few tokens, would score
    the model on a problem it was not really given. 0 turns the check off (prompts are then truncated)."""
    need = min(int(suite.min_answer_tokens), int(suite.max_new_tokens))  # never more room than the answer may use
    if not need or not generator.context:
        return
    for name, rows in data.items():
        lengths = [len(generator.encode(generator.render(m))) for m in benchmark_messages(name, rows, suite)]
        short = [i for i, length in enumerate(lengths) if generator.context - length < need]
        if short:
            worst = max(short, key=lambda i: lengths[i])
            raise LzeBenchError(
                f"eval.min_answer_tokens={need}: {len(short)} of {len(rows)} {name} prompts leave less for the answer "
                f"in {checkpoint}'s {generator.context}-token context (problem {rows[worst]['id']}: "
                f"{lengths[worst]} prompt tokens); use a model with a longer context, a shorter prompt "
                "(eval.prompt_template), or eval.min_answer_tokens=0 to truncate such prompts from the left")


def _progress(show: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, disable=not show)
