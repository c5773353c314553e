"""`logger=[tensorboard]`: event files under `<run_dir>/tensorboard/` (TensorBoard imported only when enabled).

TensorBoard plots every scalar against its event's step (or wall time) and
has no way to pick another scalar as the x-axis, so each metric is written
twice, to two folders (two TensorBoard "runs"):

* `<run_dir>/tensorboard/`           tag `<name>`, step = updates done: a
  ledger row's `step` + 1 (the policy it leaves behind), a held-out eval's
  `updates`, an eval's checkpoint `step`: one axis on which an eval sits
  where the row that produced its policy does;
* `<run_dir>/tensorboard/cum_flops/` tag `cum_flops/<name>`, step = the run's
  `cum_flops` in MFLOPs (10^6 FLOPs, floored: an event step is an int64, and
  a unit this small keeps a tiny CPU model's steps apart while 10^24-FLOP
  runs still fit).

The `cum_flops/` prefix keeps the two axes on separate charts when
`tensorboard --logdir runs/` shows many runs. The folders are separate
because TensorBoard drops events by step: a training invocation resumed from
checkpoint K opens its writers with `purge_step` = K + 1 (by_flops: the
MFLOP step after cum_flops at K), and TensorBoard's reader then hides every
older event past that point (SessionLog.START, `purge_orphaned_data`), so
the steps run again replace their first copies; one folder per axis keeps
one axis's purge from hiding the other's events. Evals are not in these
folders: a checkpoint can be evaluated after a later one (or again), and
TensorBoard (event files of version 2) neither reorders points nor drops a
tag's earlier copy of a step, while a purge would hide training events too.
So each eval setting has its own pair of folders, `tensorboard/eval-<key>/`
and `tensorboard/cum_flops/eval-<key>/`, and every eval process rewrites the
whole series of each setting it adds to (from evals.parquet, oldest
checkpoint first) and then deletes the files it replaced: the reader sees
each checkpoint once, in order. Wall
time is TensorBoard's own "Relative"/"Wall" axis; `ledger/cum_time_s` is
logged as a scalar too. Events are written with torch's SummaryWriter (torch is
already a dependency) and flushed after every step, so a live `tensorboard`
sees each step as it lands.
"""

from __future__ import annotations

import math
from pathlib import Path

from lze_bench.registry import LOGGERS

FOLDER = "tensorboard"
FLOPS_FOLDER = "cum_flops"
FLOPS_UNIT = 1e6  # cum_flops per event step in the cum_flops/ folder
MAX_STEP = 2**63 - 1


def flops_step(cum_flops: float) -> int:
    """The event step of `cum_flops` in the cum_flops/ folder."""
    return min(int(cum_flops // FLOPS_UNIT), MAX_STEP)


@LOGGERS.add("tensorboard")
class TensorboardLogger:
    module = "tensorboard"  # torch.utils.tensorboard needs the tensorboard package
    extra = "tensorboard"  # pip install 'lze-bench[tensorboard]'

    @staticmethod
    def preflight() -> None:
        return None

    def __init__(self, run_dir: Path, container: dict, resume: tuple[int, float] | None = None):
        from torch.utils.tensorboard import SummaryWriter

        root = self.root = Path(run_dir) / FOLDER
        updates, cum_flops = resume if resume is not None else (None, None)
        self.by_step = SummaryWriter(log_dir=str(root), purge_step=None if resume is None else updates + 1)
        self.by_flops = SummaryWriter(log_dir=str(root / FLOPS_FOLDER),
                                      purge_step=None if resume is None else flops_step(cum_flops) + 1)

    def log(self, section: str, metrics: dict, step: int, cum_flops: float, keys: list | None = None) -> None:
        updates = step + 1 if section == "ledger" else step  # see the module docstring
        for name, value in metrics.items():
            self.by_step.add_scalar(name, value, updates)
        if math.isfinite(cum_flops):
            x = flops_step(cum_flops)
            for name, value in metrics.items():
                self.by_flops.add_scalar(f"{FLOPS_FOLDER}/{name}", value, x)
        self.by_step.flush()
        self.by_flops.flush()

    def replace_evals(self, key: str, events: list) -> None:
        """Write the whole eval series of settings `key` ((step, metrics, cum_flops, keys), oldest first) to its
        two folders, then delete the files it replaces (see the module docstring), under a lock shared by
        eval processes of this run."""
        import fcntl

        from torch.utils.tensorboard import SummaryWriter

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".eval.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for folder, prefix, by_flops in ((self.root / f"eval-{key}", "", False),
                                             (self.root / FLOPS_FOLDER / f"eval-{key}", f"{FLOPS_FOLDER}/", True)):
                older = list(folder.glob("events.out.tfevents.*"))
                writer = SummaryWriter(log_dir=str(folder))
                for step, metrics, cum_flops, _ in events:
                    if by_flops and not math.isfinite(cum_flops):
                        continue
                    x = flops_step(cum_flops) if by_flops else step
                    for name, value in metrics.items():
                        writer.add_scalar(f"{prefix}{name}", value, x)
                writer.close()
                for path in older:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        self.by_step.close()
        self.by_flops.close()
