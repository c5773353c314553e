"""Where an evaluation's results go, and how "already evaluated" is decided ("The run directory").

Per checkpoint and settings key (settings.py), one folder:

    <checkpoint out>/<settings_key>/<benchmark>.jsonl   one row per sample (prompt, response, verdict, tokens)
    <checkpoint out>/<settings_key>/summary.json        benchmark -> metrics, settings, suite, token and time counts,
                                                        shares of responses cut at max_new_tokens and of prompts
                                                        truncated to fit the context (cut_response_frac, cut_prompt_frac)
    <checkpoint out>/<settings_key>/summary.csv         the same, one row per benchmark

`<checkpoint out>` is `<run>/evals/<checkpoint>/` for a run (`evals/initial/`
for its initial policy), else `out_dir` or `runs/eval/<model>/`. So results
with other settings sit beside each other and never overwrite one another. A
run also gets one `evals.parquet` row per (checkpoint, benchmark, settings key)
(ledger.append_eval_rows), with the run's `cum_flops` when the checkpoint was
saved. Several sampling seeds are several settings keys; their aggregate sits
in `<checkpoint out>/seeds-<group key>/` (seeds.py), same file layout.

Each metric carries its 95 % interval (metrics.py: Wilson at the effective
number of trials): `ci_low`/`ci_high` for accuracy (avg@n), `pass@k_ci_low`,
`pass@k_ci_high`, `maj@k_ci_low`, `maj@k_ci_high` for each k; a seed aggregate
adds `<metric>_std` and `<metric>_per_seed`.

A (checkpoint, benchmark, settings) result is *finished* when its summary
entry carries the settings key and its JSONL exists: `lze-bench eval` skips it
and `sweep status` counts it done (the same function decides both).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from pathlib import Path

from lze_bench.rundir import atomic_write_json, atomic_write_text

logger = logging.getLogger(__name__)

SUMMARY = "summary.json"
SUMMARY_CSV = "summary.csv"
CSV_COLUMNS = ("benchmark", "checkpoint", "step", "suite", "settings_key", "num_problems", "samples_per_problem",
               "accuracy", "ci_low", "ci_high", "ci_method", "cut_response_frac", "cut_prompt_frac", "generated_tokens",
               "tokens_per_s", "grade_timeouts", "grade_errors")
CUT_WARNING = 0.05  # above this share of cut responses or truncated prompts, the eval says so in a warning line
SEED_COLUMNS = ("seeds", "accuracy_std", "accuracy_per_seed")  # seed aggregates only (seeds.py)
METRIC_SUFFIXES = ("ci_low", "ci_high", "std", "per_seed")  # after each pass@k / maj@k column


def results_dir(checkpoint_out: Path, key: str) -> Path:
    return Path(checkpoint_out) / key


def read_summary(folder: Path) -> dict:
    path = Path(folder) / SUMMARY
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        logger.warning("%s is not valid JSON; evaluating again", path)
        return {}


def finished(folder: Path, benchmark: str, key: str, summary: dict | None = None) -> bool:
    """Is `benchmark` evaluated with settings `key` in `folder` (summary entry + samples file)?"""
    summary = read_summary(folder) if summary is None else summary
    return summary.get(benchmark, {}).get("settings_key") == key and (Path(folder) / f"{benchmark}.jsonl").exists()


def write_samples(path: Path, name: str, rows: list[dict], results, grades) -> None:
    buffer = io.StringIO()
    position = 0
    for row, result in zip(rows, results):
        for sample, completion in enumerate(result.completions):
            grade = grades[position]
            position += 1
            record = {
                "benchmark": name, "id": row["id"], "sample": sample, "prompt": result.prompt,
                "response": completion.text, "gold": row["answer"], "extracted": grade.extracted,
                "correct": grade.correct, "grade_status": grade.status, "prompt_tokens": result.prompt_tokens,
                "response_tokens": completion.tokens, "finish": completion.finish, "prompt_truncated": result.truncated,
            }
            buffer.write(json.dumps(record, ensure_ascii=False) + "\n")
    atomic_write_text(path, buffer.getvalue())


def write_summary(folder: Path, summary: dict) -> None:
    atomic_write_json(Path(folder) / SUMMARY, summary)
    present = {k for entry in summary.values() for k in entry}
    names = sorted({k for k in present if re.fullmatch(r"(pass|maj)@\d+", k)}, key=lambda k: (k[0], int(k.split("@")[1])))
    metric_keys = [k for name in names for k in (name, *(f"{name}_{end}" for end in METRIC_SUFFIXES)) if k in present]
    seed_keys = [k for k in SEED_COLUMNS if k in present]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*CSV_COLUMNS, *seed_keys, *metric_keys], extrasaction="ignore")
    writer.writeheader()
    for entry in summary.values():
        writer.writerow({k: " ".join(map(str, v)) if isinstance(v, list) else v for k, v in entry.items()})
    atomic_write_text(Path(folder) / SUMMARY_CSV, buffer.getvalue())


def append_to_run(run: Path, step: int | None, checkpoint: str, entries: list[dict]) -> None:
    """One evals.parquet row per benchmark entry (ledger.EVAL_COLUMNS); rows the file does not hold yet
    also go to the run's trackers (`logger=[...]`, lze_bench.tracking)."""
    from lze_bench.ledger import append_eval_rows, read_evals
    from lze_bench.tracking import log_evals

    cum_flops = cum_flops_at(run, step)
    rows = []
    for entry in entries:
        settings = entry["settings"]
        k = max(int(key.split("@")[1]) for key in entry if re.fullmatch(r"pass@\d+", key))
        rows.append({
            "step": step, "checkpoint": checkpoint, "benchmark": entry["benchmark"],
            "num_problems": entry["num_problems"], "samples_per_problem": entry["samples_per_problem"],
            "accuracy": entry["accuracy"], "ci_low": entry["ci_low"], "ci_high": entry["ci_high"],
            "pass_at_k": entry[f"pass@{k}"], "maj_at_k": entry[f"maj@{k}"], "k": k,
            # results written before pass@k / maj@k had intervals: NaN
            **{f"{m}_at_k_ci_{end}": entry.get(f"{m}@{k}_ci_{end}", float("nan"))
               for m in ("pass", "maj") for end in ("low", "high")},
            "suite": entry["suite"], "settings_key": entry["settings_key"],
            **{name: settings[name] for name in ("split", "temperature", "top_p", "max_new_tokens", "limit", "seed",
                                                 "prompt_template", "chat_template", "grading")},
            "generation_backend": entry["generation_backend"], "dtype": entry.get("dtype") or "", "cum_flops": cum_flops,
            # summaries written before the shares were recorded: unknown (NaN), not "nothing cut"
            **{column: entry.get(column, float("nan")) for column in ("cut_response_frac", "cut_prompt_frac")},
        })
    old = read_evals(run)
    log_evals(run, rows, recorded=list(zip(old["checkpoint"], old["benchmark"], old["settings_key"])),
              history=old.to_dict("records"))
    append_eval_rows(run, rows)


def cum_flops_at(run: Path, step: int | None) -> float:
    """The run's cumulative FLOPs when checkpoint `step_K` was saved (K = `step` updates done).

    Ledger steps count from 0 and checkpoint step_K holds the policy after K
    updates, i.e. after ledger row K-1; K = 0 (the initial policy) costs 0.
    NaN without a ledger.
    """
    from lze_bench.ledger import LEDGER_FILE, read_ledger

    if step is None or not (run / LEDGER_FILE).exists():
        return float("nan")
    ledger = read_ledger(run)
    done = ledger[ledger["step"] < step]
    return float(done["cum_flops"].iloc[-1]) if len(done) else 0.0


def print_summary(entries: list[dict], folders: list[Path]) -> None:
    """CLI-facing: one table row per (checkpoint, benchmark), then where the files are.

    Columns: avg@n (named with its n) and its 95 % interval, then pass@k and maj@k [interval] for each k > 1
    (pass@1 = avg@n, and with one sample maj@1 = avg@1 too); seed aggregates (entries with `seeds`) show
    avg@n as mean ± std over seeds and each seed's value."""
    from rich.console import Console
    from rich.table import Table

    sampled = {int(e["samples_per_problem"]) for e in entries}
    avg = f"avg@{sampled.pop()}" if len(sampled) == 1 else "avg@n"
    ks = sorted({int(key[5:]) for e in entries for key in e if re.fullmatch(r"pass@\d+", key)} - {1})
    seeded = any("seeds" in e for e in entries)
    table = Table(title="lze-bench eval")
    for column in ("checkpoint", "benchmark", "problems", "n", *(["seeds"] if seeded else []), avg, "95% CI",
                   *(["per seed"] if seeded else []), *[f"{m}@{k}" for m in ("pass", "maj") for k in ks],
                   "cut resp/prompt", "tokens/s"):
        table.add_column(column, justify="right", no_wrap=column.startswith("cut"))
    for e in entries:
        speed = f"{e['tokens_per_s']:.1f}" if e.get("tokens_per_s") else "-"
        mean = f"{e['accuracy']:.4f}" + (f" ± {e['accuracy_std']:.4f}" if "accuracy_std" in e else "")
        spread = [" ".join(f"{v:.3f}" for v in e.get("accuracy_per_seed", []))] if seeded else []
        table.add_row(str(e["checkpoint"])[-40:], e["benchmark"], str(e["num_problems"]), str(e["samples_per_problem"]),
                      *([",".join(map(str, e.get("seeds", [])))] if seeded else []), mean,
                      _interval(e.get("ci_low"), e.get("ci_high")), *spread,
                      *[_metric(e, f"{m}@{k}") for m in ("pass", "maj") for k in ks], _cut(e), speed)
    console = Console(width=max(120, Console().width))
    console.print(table)
    if entries:
        from lze_bench.evaluation.settings import describe

        first = entries[0]
        console.print(f"suite {first['suite']} (settings {first['settings_key']}: {describe(first['settings'])}); "
                      f"{avg}: mean over problems of the share of correct samples (= pass@1); intervals: 95% "
                      "Wilson over problems (lze_bench/evaluation/metrics.py)", highlight=False)
    for folder in folders:
        console.print(f"outputs: {folder}", highlight=False)


def _cut(entry: dict) -> str:
    """Shares of responses cut at max_new_tokens / prompts truncated ("-" in results written before they were
    recorded); `!` marks a share over CUT_WARNING."""
    shares = [entry.get("cut_response_frac"), entry.get("cut_prompt_frac")]
    if any(v is None or v != v for v in shares):
        return "-"
    flag = " !" if max(shares) > CUT_WARNING else ""
    return f"{shares[0]:.0%}/{shares[1]:.0%}{flag}"


def _interval(low, high) -> str:
    if low is None or high is None or low != low or high != high:  # NaN: a result written before intervals
        return "-"
    return f"[{low:.3f}, {high:.3f}]"


def _metric(entry: dict, name: str) -> str:
    if name not in entry:
        return "-"
    interval = _interval(entry.get(f"{name}_ci_low"), entry.get(f"{name}_ci_high"))
    return f"{entry[name]:.3f}" + ("" if interval == "-" else f" {interval}")
