"""Which OpenRLHF checkpoint a rerun resumes from (`--ckpt.load_enable`, openrlhf.md §6).

OpenRLHF 0.11.2 resumes whenever `{ckpt.path}/_actor` exists. DeepSpeed writes
the tag directory first and the `latest` file last; a job killed during its
first save leaves `_actor/` without `latest`: `DeepspeedStrategy.load_ckpt`
then loads nothing and returns `{}` states, and `PPOTrainer.fit` fails on
`checkpoint_states["episode"]` (KeyError) on every rerun. A later interrupted
save leaves `latest` on the previous good tag, which loads.

`set_aside_unloadable(ckpt_path)` runs in the driver before OpenRLHF starts:
an `_actor/` whose `latest` is missing or names no directory is renamed
`_actor.unloadable-<time>` with a warning, so the run starts from scratch
(lze-bench's ledger is truncated accordingly by the trainer's restore).
`fresh_states()` is what OpenRLHF's `init_checkpoint_states` returns when
there is nothing to resume; the trainer falls back to it for an empty dict.

`remove_ds_states(ckpt_path)` runs after DONE (a finished run is never
resumed): it deletes the DeepSpeed states (`_actor/`, and any set-aside
`_actor.unloadable-*`) and HF copies the trainer did not adopt, ~43 GB for a
1.5B model at `ckpt.max_num` 2 (bf16 weights + fp32 master weights + two Adam
moments per tag); the HF checkpoints under `checkpoints/` stay.
`backend.keep_ds_states=true` keeps them (to continue training elsewhere).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)


def fresh_states() -> dict:
    return {"episode": 0, "global_step": 0, "total_consumed_prompts": 0, "data_loader_state_dict": {}}


def loadable_tag(actor_dir: Path) -> str | None:
    """The tag DeepSpeed would load from `actor_dir` (via its `latest` file), or None."""
    latest = actor_dir / "latest"
    if not latest.is_file():
        return None
    tag = latest.read_text().strip()
    directory = actor_dir / tag
    if not tag or not directory.is_dir() or not any(directory.iterdir()):
        return None
    return tag


def set_aside_unloadable(ckpt_path: str | Path) -> Path | None:
    """Rename an `_actor/` checkpoint that cannot be loaded; returns its new path, or None if nothing moved."""
    actor_dir = Path(ckpt_path) / "_actor"
    if not actor_dir.is_dir() or loadable_tag(actor_dir) is not None:
        return None
    target = actor_dir.with_name(f"_actor.unloadable-{time.strftime('%Y%m%d-%H%M%S')}")
    actor_dir.rename(target)
    log.warning("checkpoint %s has no loadable state (interrupted save); set aside as %s, starting from scratch",
                actor_dir, target)
    return target


def remove_ds_states(ckpt_path: str | Path) -> list[Path]:
    """Delete a finished run's DeepSpeed states and unadopted HF copies under `ckpt_path`; the removed paths."""
    root = Path(ckpt_path)
    if not root.is_dir():
        return []
    removed = [p for p in sorted(root.iterdir()) if p.is_dir() and (p.name.startswith("_actor") or
                                                                     p.name.endswith("_hf"))]
    for path in removed:
        shutil.rmtree(path)
    if removed:
        log.info("removed DeepSpeed states of the finished run: %s (backend.keep_ds_states=true keeps them)",
                 ", ".join(p.name for p in removed))
    return removed
