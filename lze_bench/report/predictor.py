"""How well ASTRAL's difficulty predictors did: a report section from the ledgers and offline records.

Every astral run records, per step, how the `p_hat` of the prompts it rolled out (from its round's draw)
compares with their measured pass rates: mean absolute error, Spearman's rho, Pearson's r (ledger
`astral_pred_*`). With the learned head (selector.predictor=trained|checkpoint, selectors.md §3) the
untrained cosine kernel over the same encoder embeddings is computed beside it every round, never used
to select, and measured the same way (`astral_kernel_*`): the two predictors on the same prompts and
steps. The head's build also scores both on held-out labelled questions (offline_flops.json
`validation`). This section shows them side by side, with the offline FLOPs the head cost; it reads
files only and is separate from Tables 1 and 2.
"""

from __future__ import annotations

import math

import pandas as pd

from lze_bench.report.formats import markdown, sci
from lze_bench.report.offline import portable_path, read_offline

METRICS = ("mae", "spearman", "pearson")
NAMES = {"kernel": "kernel (cosine, untrained)", "trained": "trained head (lze-bench)",
         "checkpoint": "head from a checkpoint"}


def predictor_accuracy(runs) -> pd.DataFrame | None:
    """One row per run and predictor measured: label, seed, predictor, ran (bool), steps, mean of each metric
    over steps, first and last step's MAE, held-out validation (NaN when absent); None without astral runs."""
    rows = []
    for run in runs:
        led = run.ledger
        if "astral_pred_mae" not in led.columns:
            continue
        record = read_offline(run.run_dir)
        ran = record.get("predictor", "kernel") if record else "kernel"
        validation = record.get("validation") or {}
        for prefix, name in (("astral_pred", ran), ("astral_kernel", "kernel")):
            if prefix == "astral_kernel" and ran == "kernel":
                continue
            if f"{prefix}_mae" not in led.columns:
                continue
            measured = led[led[f"{prefix}_mae"].notna()]
            if not len(measured):
                continue
            row = {"label": run.label, "seed": run.seed, "predictor": name, "ran": prefix == "astral_pred",
                   "steps": int(len(measured)),
                   "mae_first": float(measured[f"{prefix}_mae"].iloc[0]),
                   "mae_last": float(measured[f"{prefix}_mae"].iloc[-1])}
            for metric in METRICS:
                column = f"{prefix}_{metric}"
                row[metric] = float(measured[column].mean()) if column in measured else float("nan")  # NaN steps out
                row[f"heldout_{metric}"] = float((validation.get(name) or {}).get(metric, float("nan")))
            rows.append(row)
    return pd.DataFrame(rows) if rows else None


def _fmt(value: float) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.3f}"


def predictor_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Markdown cells: seed means per label and predictor (the one that ran first)."""
    header = ["selector", "predictor", "seeds", "steps measured", "MAE of p̂", "Spearman ρ", "Pearson r",
              "MAE first step", "MAE last step", "held-out MAE", "held-out ρ", "held-out r"]
    body = []
    for (label, name), group in frame.groupby(["label", "predictor"], sort=False):
        ran = bool(group["ran"].iloc[0])
        body.append([label, NAMES.get(name, name) + (" — ran" if ran else " — beside it, not used"),
                     str(len(group)), str(int(group["steps"].sum())),
                     *[_fmt(group[m].mean()) for m in METRICS], _fmt(group["mae_first"].mean()),
                     _fmt(group["mae_last"].mean()), *[_fmt(group[f"heldout_{m}"].mean()) for m in METRICS]])
    return header, body


def _offline_lines(offline: pd.DataFrame | None, budget: float | None) -> list[str]:
    if offline is None or not len(offline):
        return []
    lines = []
    for label, group in offline.groupby("label", sort=False):
        first = group.iloc[0]
        parts = [f"{part} {sci(float(first[key]))}" for part, key in
                 (("labelling rollouts", "labeling"), ("encoder passes", "encoder_flops"), ("head training", "training"))
                 if first[key] is not None and math.isfinite(float(first[key]))]
        share = f" = {float(first['total']) / budget:.2f} × the FLOP budget" if budget else ""
        times = first["time_s"] or {}
        build = sum(float(v) for v in times.values()) if times else float("nan")
        labelers = first.get("labeler_warmstart_s")
        built = ""
        if math.isfinite(build):
            built = (f"; built once in {build:.0f} s (labelling {float(times.get('labeling', 0)):.0f} s, head "
                     f"training {float(times.get('training', 0)):.0f} s)")
            if labelers is not None and math.isfinite(float(labelers)):
                built += (f" after the labelling models' own warm start ({float(labelers):.0f} s; not charged: they "
                          "stand in for the public models the authors label with)")
            built += ", shared by every run of the sweep"
        encoder = portable_path(first["encoder"])  # offline_summary's already; a caller's frame may hold any
        lines.append(f"Offline cost of {label}'s predictor ({NAMES.get(first['predictor'], first['predictor'])}, "
                     f"encoder `{encoder}`): {', '.join(parts)}; total {sci(float(first['total']))} FLOPs"
                     f"{share}, per run (seed mean {sci(float(group['total'].mean()))}){built}.")
    return lines


def predictor_section(frame: pd.DataFrame | None, offline: pd.DataFrame | None = None,
                      budget: float | None = None) -> list[str]:
    """report.md lines of the section (empty without astral runs)."""
    if frame is None:
        return []
    lines = [
        "## ASTRAL's predictor: predicted vs measured pass rate",
        "",
        markdown(*predictor_cells(frame)),
        "Per step, over the prompts ASTRAL rolled out: mean absolute error between `p̂` (from the round's draw) "
        "and the measured pass rate, Spearman's ρ and Pearson's r between them (ledger `astral_pred_*` for the "
        "predictor that ran, `astral_kernel_*` for the kernel computed beside a learned head over the same "
        "encoder embeddings); averaged over steps, then seeds. Held-out: both predictors on the labelled "
        "questions the head's training never saw, each labelling model's pass rates in turn, the same "
        "references for both (offline_flops.json `validation`). The kernel is lze-bench's untrained cosine "
        "attention; the trained head is the authors' architecture and recipe, trained on pass rates of models "
        "other than the policy (selectors.md §3).",
        "",
    ]
    offline_lines = _offline_lines(offline, budget)
    if offline_lines:
        lines += offline_lines + ["", "Tables 1-3 compare at equal online FLOPs, as the paper does; rows marked "
                                  "`(+offline)` charge this cost too (paired with uniform the same way; their "
                                  "curve is the run's own shifted by its offline FLOPs).", ""]
    return lines


def predictor_note(frame: pd.DataFrame | None, offline: pd.DataFrame | None) -> str:
    """One line for the tables' text: which predictor each astral label ran, and where its offline cost is."""
    if frame is None:
        return ""
    ran = frame[frame["ran"]].groupby("label", sort=False)["predictor"].agg(lambda p: sorted(set(p)))
    parts = [f"{label} ran predictor={'/'.join(names)} ({', '.join(NAMES.get(n, n) for n in names)})"
             for label, names in ran.items()]
    charged = sorted(set(offline["label"])) if offline is not None and len(offline) else []
    verb = "appears" if len(charged) == 1 else "appear"
    tail = (f"; {', '.join(charged)} also {verb} as `(+offline)` rows, charged with the predictor's offline FLOPs "
            "(see the predictor section)") if charged else ""
    return "ASTRAL's predictor: " + "; ".join(parts) + tail + "."

