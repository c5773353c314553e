"""The training signal the runs used: advantage estimator and reward shape, read from each run's config.yaml.

Both are trainer settings (`trainer.advantage_estimator`, `trainer.reward_shape`) and part of a run's
identity, so a report says which ones its numbers come from. A config written before the keys existed ran
GRPO's estimator (Dr. GRPO's with `trainer.scale_rewards=false`) on binary rewards.
"""

from __future__ import annotations

from lze_bench.advantages import resolved_estimator
from lze_bench.report.data import _read_config

ESTIMATOR_TEXT = {
    "grpo": "(r − mean) / (std + ε) over each prompt's rollouts (GRPO)",
    "dr_grpo": "r − mean over each prompt's rollouts (Dr. GRPO: no std scaling)",
    "rloo": "r − the mean of the prompt's other rollouts (RLOO's leave-one-out)",
}
SHAPE_TEXT = {
    "binary": "1 correct, 0 otherwise",
    "deepscaler": "1 correct, 0.1 wrong with a boxed answer, 0 without one (DeepScaleR's)",
}


def training_signal(config: dict) -> tuple[str, str]:
    """(estimator, reward shape) a run's config.yaml ran."""
    trainer = config.get("trainer") or {}
    return resolved_estimator(trainer), str(trainer.get("reward_shape") or "binary")


def training_note(runs) -> str:
    """One line on the estimator and reward shape, naming the runs when they differ ("" without runs)."""
    settings = {}
    for run in runs:
        settings.setdefault(training_signal(_read_config(run.run_dir)), []).append(f"{run.label} seed {run.seed}")
    if not settings:
        return ""
    if len(settings) == 1:
        (estimator, shape), = settings
        return (f"Training signal, every run: advantages `trainer.advantage_estimator={estimator}`, "
                f"{ESTIMATOR_TEXT[estimator]}; rewards `trainer.reward_shape={shape}`, {SHAPE_TEXT[shape]}.")
    parts = [f"`advantage_estimator={estimator}`, `reward_shape={shape}`: {', '.join(names)}"
             for (estimator, shape), names in settings.items()]
    return "**Training signal differs between runs** (compare with care): " + "; ".join(parts) + "."
