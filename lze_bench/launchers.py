"""Launcher presets (`launcher=local|slurm`): where sweep jobs run, validated by one schema.

The submitit executors that use these settings live in `lze_bench.sweep.submit`
(slurm: sbatch flags; local: timeout and thread count per job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from lze_bench.config.schema import require

LAUNCHER_KINDS = ("local", "slurm")


@dataclass
class LauncherConfig:
    name: str = "local"  # local: submitit's local executor (processes); slurm: sbatch
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem_gb: Optional[int] = None
    timeout_min: int = 60
    array_parallelism: int = 8  # jobs of one sweep running at once
    max_requeue: int = 3  # requeues on preemption/timeout before a job counts as failed
    # seconds of warning Slurm gives (SIGUSR2) before it stops a job: the training step in hand is finished and
    # saved in them (lze_bench.preemption); more than one step's time
    signal_delay_s: int = 180
    constraint: Optional[str] = None
    setup: List[str] = field(default_factory=list)  # shell lines run before the job (module load, venv)
    additional_parameters: Dict[str, str] = field(default_factory=dict)  # extra #SBATCH keys

    def __post_init__(self):
        require(self.name in LAUNCHER_KINDS, "launcher.name", f"use one of {', '.join(LAUNCHER_KINDS)}")
        for key in ("nodes", "cpus_per_task", "timeout_min", "array_parallelism"):
            require(getattr(self, key) > 0, f"launcher.{key}", "must be > 0")
        require(self.gpus_per_node >= 0, "launcher.gpus_per_node", "must be >= 0")
        require(self.max_requeue >= 0, "launcher.max_requeue", "must be >= 0")
        require(self.signal_delay_s > 0, "launcher.signal_delay_s", "must be > 0 (seconds of warning before a stop)")
        require(self.signal_delay_s < 60 * self.timeout_min, "launcher.signal_delay_s",
                f"must be shorter than launcher.timeout_min ({self.timeout_min} min)")
