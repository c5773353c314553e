"""report.md: the three tables with the definitions a reader needs to trust them, and the figures.

Every statement under a table is generated from the same numbers and
options the table used (target fraction, budget, held-out size), so the text
cannot drift from the code (definitions: paired.py, tables.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from lze_bench.report.initial import provenance_line, recipe_notes, variation_note
from lze_bench.report.predictor import predictor_note, predictor_section
from lze_bench.report.training import training_note
from lze_bench.report.data import no_common_budget
from lze_bench.report.formats import sci
from lze_bench.report.paired import heldout_standard_error
from lze_bench.report.tables import BASELINE


def _sampling_error(report: dict) -> str:
    problems = report["heldout_problems"]
    t1 = report["table1"]
    base = t1[(t1["label"] == BASELINE) & (t1["benchmark"] == "heldout")] if len(t1) else t1
    if not problems or base.empty:
        return "The held-out set's own sampling error is not known here (heldout.jsonl gives no problem count)."
    p = float(base["accuracy"].iloc[0])
    se = heldout_standard_error(p, problems)
    return (f"Held-out sampling error: {problems} problems, decoded greedily (a deterministic function of the "
            f"weights), so the only sampling error is which problems were drawn: the binomial standard error at "
            f"uniform's {100 * p:.1f}% is √(p(1−p)/n) = {100 * se:.1f} points (95%: ± {196 * se:.1f}). A paired "
            "difference carries at most √2 times that (less, since both runs are scored on the same problems), "
            "and the interval over seeds already includes it.")


def _capped(report: dict) -> str:
    if not report["budget"]:
        return no_common_budget(report["runs"])  # none had one, or they differ: report.data says which
    capped = sorted(f"{r.label} seed {r.seed}" for r in report["runs"] if r.done.get("stopped_by") == "steps")
    if not capped:
        return f"Every run stopped on the FLOP budget ({sci(report['budget'])} FLOPs), none on the step cap."
    return (f"**Stopped on the step cap before the budget** (less compute than the others; compare with care): "
            f"{', '.join(capped)}.")


GRADING_TEXT = {
    "boxed": "the last `\\boxed{}` of each response (the rule training rewards use)",
    "math_verify": "math-verify's extraction from the whole response (lighteval's rule: a box, else an answer "
                   "sentence such as \"The answer is 18.\" or \"#### 18\", else the last expression)",
}
PROMPT_TEXT = {
    "default": "each benchmark's own template in one user turn (the math benchmarks: the problem, then the CoT "
               "instruction)",
    "qwen25_math": "Qwen2.5-Math's convention (the CoT instruction as the system turn)",
}


def _conventions(report: dict) -> str:
    """In words: how the eval results the report uses read answers and prompted (one settings key per benchmark)."""
    frame = report.get("conventions")
    if frame is None or frame.empty:
        return ""
    parts = []
    for (grading, prompt), group in frame.groupby(["grading", "prompt"], sort=True):
        names = ", ".join(sorted(set(group["benchmark"])))
        said = PROMPT_TEXT.get(prompt) or (f"a custom eval.prompt_template ({prompt})" if prompt.startswith("custom")
                                           else prompt)
        parts.append(f"{names}: answers read from {GRADING_TEXT.get(grading, grading)} (`grading={grading}`), "
                     f"prompt {said}")
    return "Grading and prompts: " + "; ".join(parts) + "."


def _figure(number: int, figure) -> list[str]:
    return [f"![{figure.name}]({figure.name}.png)", "", f"*Figure {number} ({figure.name}).* {figure.caption}", ""]


def _figures(figures: list, start: int = 1) -> list[str]:
    lines = ["## Figures", ""]
    for number, figure in enumerate(figures, start=start):
        lines += _figure(number, figure)
    return lines


def _is_summary(figure) -> bool:
    return figure.name == "summary" or figure.name.startswith("summary_")


def _summary(texts: dict, figures: list) -> tuple[list[str], int]:
    """The summary section (its table, then its figures: Figure 1 on), and how many figures it showed."""
    if "summary" not in texts:
        return [], 0
    shown = [figure for figure in figures if _is_summary(figure)]
    lines = ["## Summary: each selector against uniform GRPO, paired by seed", "", texts["summary"],
             "FLOPs to target: Table 2's ratio to uniform on the same seed (below 1: fewer FLOPs), \"not reached\" "
             "when no seed reached the target. Δ accuracy: Table 1's difference to uniform on the same seed. Each with its "
             "95% paired t-interval; significant when it excludes 1 (ratio) or 0 (Δ). Sorted by Δ, best first; "
             "`(+offline)` rows under their selector.", ""]
    for number, figure in enumerate(shown, start=1):
        lines += _figure(number, figure)
    return lines, len(shown)


def portable(path) -> str:
    """A path as report.md may print it: relative to the working directory when under it, else its name (a
    report never names the machine's folders)."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return path.name


def _eval_results(texts: dict, report: dict) -> list[str]:
    """Which eval results each benchmark's rows use (report/suites.py), when the runs have any."""
    if "benchmarks" not in texts:
        return []
    conventions = _conventions(report)
    return ["## Eval results used", "", texts["benchmarks"], *([conventions, ""] if conventions else []),
            "Each benchmark's rows come from one eval setting (the suite's sampling settings, problem limit, "
            "prompt template and grading; `lze-bench report --eval-suite NAME_OR_KEY` chooses when a run "
            "holds several). A checkpoint evaluated with several sampling seeds (`eval.seeds`, one settings key "
            "each) counts as the mean over its seeds (\"eval seeds\" per checkpoint); the tables' intervals are "
            "over training seeds. Each eval result also records its own 95% interval over problems (evals.parquet "
            "`ci_low`/`ci_high` for avg@n, `pass_at_k_ci_*`, `maj_at_k_ci_*`): Wilson's score interval at the "
            "effective number of trials (p(1−p) over the variance of the mean of the per-problem values, "
            "clipped between the number of problems and that times the samples a problem holds), so it never has "
            "zero width, not even at 0 or 100% (lze_bench/evaluation/metrics.py). Each eval point sits at its "
            "checkpoint's cumulative training FLOPs (the ledger's cum_flops after that many steps; the initial "
            "policy at 0), and a run is used for a benchmark only when its final checkpoint, the policy at the "
            "budget, was evaluated. \"Most cut\" is the largest share, over a benchmark's eval points, of answers "
            "that stopped at max_new_tokens and of prompts truncated to fit the model's context: a cut answer "
            "counts as wrong, so a large share means the accuracy measures the budget as much as the model.", ""]


def report_md(name: str, sweep_dir: Path, report: dict, texts: dict, figures: list) -> str:
    """report.md; `figures` are plot_style.Figure objects (name, files, caption) in display order."""
    seeds = sorted({r.seed for r in report["runs"]})
    fraction = report["options"].target_fraction
    budget = report["budget"]
    has_budget = bool(budget) and math.isfinite(budget)
    at = "the FLOP budget" if has_budget else "the end of each run"
    title1 = f"{sci(budget)} FLOPs each" if has_budget else "no common FLOP budget: at the end of each run"
    summary_lines, shown = _summary(texts, figures)
    summary_figures = [figure for figure in figures if _is_summary(figure)][:shown]
    lines = [
        f"# Report: {name}",
        "",
        f"Generated by `lze-bench report {portable(sweep_dir)}` from {len(report['runs'])} finished runs "
        f"(seeds {', '.join(map(str, seeds))}). Accuracy `heldout` is the synthetic held-out set evaluated "
        "during training; other benchmarks come from `lze-bench eval`. Runs of one seed are paired (same data "
        "order, same warm start), so each selector is compared with uniform GRPO seed by seed.",
        "",
        provenance_line(sweep_dir, report["runs"]),
        "",
        *summary_lines,
        *([note, ""] if (note := variation_note(report["runs"])) else []),
        *([note, ""] if (note := training_note(report["runs"])) else []),
        *_eval_results(texts, report),
        f"## Table 1: accuracy at equal compute ({title1})",
        "",
        texts["table1"],
        "Accuracy: at each run's last eval, taken when it stops at the first step whose cumulative FLOPs reach the "
        "budget (\"FLOPs spent\" shows the overshoot, at most one step); the seed mean and the per-seed range "
        "(min–max), not an interval: seeds differ in data order and, where the runs say so, in their initial "
        "policy, so the spread of accuracies is theirs; the paired Δ is the comparison. Δ: selector minus uniform "
        "on the same seed, "
        "mean ± 95% paired t-interval over seeds, mean ± t(0.975, n−1)·sd/√n on the per-seed differences. "
        "Significant: that interval excludes 0 (a two-sided paired t-test at 5%); \"–\" with one pair.",
        "",
        *(["### Table 1b: Δ vs uniform per seed pair (one initial policy each)", "", texts["table1b"],
           "Each column is one seed pair and its own warm start (held-out accuracy of that initial policy in the "
           "header): how each selector's Δ moves from one initial policy to another.", ""]
          if "table1b" in texts else []),
        _sampling_error(report),
        "",
        _capped(report),
        "",
        *([note, ""] if (note := predictor_note(report.get("predictor"), report.get("offline"))) else []),
        f"## Table 2: compute to reach {fraction:g} of uniform's gain",
        "",
        texts["table2"],
        f"Target, per seed: a0 + {fraction:g} · (A − a0), where a0 is the initial policy's accuracy and A is "
        f"uniform's accuracy at {at} on that seed (a share of uniform's gain, so the target lies where uniform "
        "still learns rather than on its plateau, where noise decides). FLOPs to target: where the run's "
        "accuracy-vs-FLOPs curve (eval points joined linearly, the initial policy at 0) first reaches it. "
        "Ratio: that over uniform's on the same seed; geometric mean over seeds, 95% t-interval on the log "
        "ratios; significant when it excludes 1. \"not reached\": no seed's curve reached the target (k/n counts "
        "the seeds that did; only those enter the mean). Set the fraction with `lze-bench report --target-fraction`.",
        "",
        "## Table 3: compute by phase",
        "",
        texts["table3"],
        "FLOPs: counted from the tokens actually processed (lze-bench docs/design.md \"FLOP accounting\"): rollout "
        "= generation F(prompt + response) per sample (probes included); log-prob = the old-policy forward over "
        "every trained sequence (and the reference forward with a KL term), F(L) each; train = 3·F(L) per trained "
        "sequence per PPO epoch; select = extra passes a selector asked for. Held-out evals are not training "
        "compute and are not counted. Offline = compute spent before step 0 and in no step (ASTRAL's learned "
        "predictor: labelling rollouts, encoder passes, head training; AdaRFT's difficulty labels made by "
        "`lze-bench label`: the reference model's rollouts; offline_flops.json), not in the total; labels that "
        "come with the data are external, not charged (prompt_metadata.json). "
        "Rounds / step = rollout rounds (one generation call each) per training step. Rollouts generated / step = "
        "responses generated per step (the ledger's `samples`, probes included; rollout FLOPs follow them); "
        "rollouts trained / step = fresh responses that reached the actor update (`responses_trained`; log-prob and "
        "train FLOPs follow them, with replayed groups' on top): fewer than generated when a selector drops groups "
        "or trains a subset of each group's rollouts (pods); \"–\" for ledgers written before the column. Kept "
        "fraction = groups reaching the actor update / prompts rolled out.",
        "",
    ]
    lines += predictor_section(report.get("predictor"), report.get("offline"), budget if has_budget else None)
    lines += recipe_notes(sweep_dir)
    lines += _figures([figure for figure in figures if figure not in summary_figures], start=shown + 1)
    return "\n".join(lines).rstrip("\n") + "\n"
