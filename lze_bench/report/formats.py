"""Render Tables 1-3 as Markdown and LaTeX (booktabs) from their numeric DataFrames.

Display choices: accuracy in percent with one decimal; FLOPs in 3 significant
digits (`1.23e15`, in LaTeX `1.23\\times10^{15}`); ratios with two decimals;
differences in percentage points with a sign;
"± x" is the 95% CI half-width over seeds (tables.mean_ci), left out
for a single seed; wall time in seconds below 2 minutes, else minutes.
"""

from __future__ import annotations

import math
import re

import pandas as pd

BENCH_TITLES = {"heldout": "held-out"}


def _num(value: float, fmt: str) -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, fmt)


def pm(mean: float, half: float, fmt: str, scale: float = 1.0) -> str:
    if mean is None or not math.isfinite(mean):
        return "–"
    text = format(mean * scale, fmt)
    return text if half is None or not math.isfinite(half) else f"{text} ± {format(half * scale, fmt.lstrip('+'))}"


def sci(value: float) -> str:
    """`1.23e15`, `4.00e2`, `1.50e-3` (no '+', no leading zeros in the exponent)."""
    if value == 0:
        return "0"
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", _num(value, ".2e"))


def budget_cells(t1: pd.DataFrame, budget: float | None) -> tuple[list[str], list[list[str]]]:
    """Table 1: accuracy at equal compute (seed mean, per-seed range), Δ to uniform on the same seed (points, the
    comparison), FLOPs spent."""
    spent = "FLOPs spent (× budget)" if budget else "FLOPs spent"
    header = ["benchmark", "selector", "accuracy (%, seed mean)", "per-seed range (%)",
              "Δ vs uniform (points, paired)", "significant", spent,
              "stopped by step cap", "seeds"]
    rows = []
    for _, r in t1.iterrows():
        delta = "reference" if r["label"] == "uniform" else pm(r["delta"], r["delta_ci"], "+.1f", 100.0)
        flops = f"{sci(r['flops'])} ({_num(r['flops_over_budget'], '.2f')})" if budget else sci(r["flops"])
        rows.append([BENCH_TITLES.get(r["benchmark"], str(r["benchmark"])), str(r["label"]),
                     _num(100 * r["accuracy"], ".1f"), seed_range(r["accuracy_min"], r["accuracy_max"]), delta,
                     str(r["significant"]), flops,
                     f"{int(r['capped'])}/{int(r['seeds'])}" if budget else "–", str(int(r["seeds"]))])
    return header, rows


def seed_range(low: float, high: float) -> str:
    """"44.3–80.0" in percent; the value alone when the seeds agree (or there is one); "–" without one."""
    if low is None or not math.isfinite(low):
        return "–"
    return f"{100 * low:.1f}" if abs(high - low) < 5e-4 else f"{100 * low:.1f}–{100 * high:.1f}"


def reach_cells(t2: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Table 2: FLOPs to the paired target, as a ratio to uniform's on the same seed."""
    header = ["benchmark", "selector", "target acc. (%, seed mean)", "FLOPs to target", "FLOPs (× uniform, paired)",
              "95% CI", "significant", "seeds reached"]
    rows = []
    for _, r in t2.iterrows():
        reached = int(r["reached"])
        ratio = "reference" if r["label"] == "uniform" else (_num(r["ratio"], ".2f") if reached else "not reached")
        interval = "–" if not math.isfinite(r["ratio_low"]) else f"[{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]"
        rows.append([BENCH_TITLES.get(r["benchmark"], str(r["benchmark"])), str(r["label"]),
                     _num(100 * r["target"], ".1f"), sci(r["flops_to_target"]) if reached else "not reached",
                     ratio, interval if r["label"] != "uniform" else "–", str(r["significant"]),
                     f"{reached}/{int(r['seeds'])}"])
    return header, rows


def benchmark_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Which eval results each benchmark's rows come from (report/suites.py)."""
    header = ["benchmark", "problems", "samples / problem", "suite", "settings key", "settings", "eval seeds", "runs",
              "most cut (answers / prompts)"]
    rows = [[str(r["benchmark"]), str(r["problems"]), str(int(r["samples_per_problem"])), str(r["suite"]),
             str(r["settings_key"]), str(r["settings"]), str(r["eval_seeds"]), str(int(r["runs"])),
             _cut_cell(r.get("cut_response_frac"), r.get("cut_prompt_frac"))]
            for _, r in frame.iterrows()]
    return header, rows


def _cut_cell(responses, prompts) -> str:
    """"12% / 0%"; "-" where the results predate the shares (NaN)."""
    if responses is None or prompts is None or responses != responses or prompts != prompts:
        return "-"
    return f"{responses:.0%} / {prompts:.0%}"


def cost_cells(t3: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Table 3: FLOPs by phase (seed means), offline FLOPs, steps, rollout rounds per step, rollouts generated
    and trained per step ("–" where a ledger predates `responses_trained`), kept fraction, wall time."""
    minutes = bool(t3["wall_time_s"].max() >= 120) if len(t3) else False
    unit, scale = ("min", 1 / 60) if minutes else ("s", 1.0)
    header = ["selector", "rollout FLOPs", "log-prob FLOPs", "train FLOPs", "select FLOPs", "total FLOPs",
              "offline FLOPs", "steps", "rounds / step", "rollouts generated / step",
              "rollouts trained / step", "kept frac.", f"wall time ({unit})", "seeds"]
    rows = []
    for _, r in t3.iterrows():
        rows.append([
            str(r["label"]), sci(r["flops_rollout"]), sci(r["flops_logprob"]), sci(r["flops_train"]),
            sci(r["flops_select"]), sci(r["flops_total"]), sci(r.get("offline_flops", 0.0)), _num(r["steps"], ".1f"),
            _num(r.get("gen_rounds_per_step", float("nan")), ".2f"),
            _num(r.get("generated_per_step", float("nan")), ".1f"),
            _num(r.get("trained_per_step", float("nan")), ".1f"),
            _num(r["kept_fraction"], ".2f"),
            pm(r["wall_time_s"], r["wall_time_s_ci"], ".1f", scale), str(int(r["seeds"])),
        ])
    return header, rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    align = ["---"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


_SCI = re.compile(r"(-?\d+(?:\.\d+)?)e(-?)0*(\d+)")


_TEX = {"\\": r"\textbackslash{}", **{c: "\\" + c for c in "&%$#_{}"}}


def tex_cell(text: str) -> str:
    text = "".join(_TEX.get(char, char) for char in text)
    text = _SCI.sub(lambda m: f"${m.group(1)}{{\\times}}10^{{{m.group(2)}{m.group(3)}}}$", text)
    return text.replace("±", r"$\pm$").replace("×", r"$\times$").replace("–", "--")


def latex(header: list[str], rows: list[list[str]], caption: str, label: str) -> str:
    """A booktabs table (needs \\usepackage{booktabs})."""
    spec = "l" + "r" * (len(header) - 1)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{tex_cell(caption)}}}", f"\\label{{{label}}}",
             f"\\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(tex_cell(h) for h in header) + r" \\",
             r"\midrule"]
    lines += [" & ".join(tex_cell(c) for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
