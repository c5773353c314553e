"""The run state the OpenRLHF trainer actor holds (no OpenRLHF import; openrlhf.md §9 "What lives where").

The `PPOTrainer` Ray actor is the single controller: it holds the selector, the
data order, the ledger writer and the checkpoint links. It learns the run from
env `LZE_CONFIG` (the run directory's resolved config.yaml, set by entry.py for
every Ray actor), because OpenRLHF's argparse rejects flags it does not know,
and the run's launch plan from `openrlhf/command.json` (plan.py): the data-parallel
ranks the update is dealt to, the trim unit, the replay store's capacity and
whether a reference pass runs (booked in the ledger) are the plan's, as recorded
when the run was prepared.

Step numbering (ours, to reconcile with the local backend): ledger and rollout
rows carry the 0-based index `t` of the training step (= `RolloutBatch.step`
and the selectors' `step`); the checkpoint taken after step `t` is named
`checkpoints/step_{t+1:06d}` (= training steps done; eval step 0 is the
initial policy). OpenRLHF's `global_step` counts optimizer steps, which is
fewer when a step trains nothing (trim.py), so names come from our step count,
saved in `client_states`. Resuming from checkpoint `S` keeps ledger rows
`0..S-1`; the replay store (astral) of checkpoint `S` is
`replay_store/step_{S:06d}.pt`.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
from pathlib import Path

import numpy as np

from lze_bench.backends.openrlhf.accounting import ledger_row, rollout_rows
from lze_bench.backends.openrlhf.plan import LaunchPlan, launch_plan, load_plan
from lze_bench.backends.openrlhf.selection import StepDriver
from lze_bench.backends.openrlhf.trim import trained_masks
from lze_bench.data_order import DataOrder
from lze_bench.errors import LzeBenchError, damaged_file
from lze_bench.ledger import Ledger, RolloutLog, run_file_fix
from lze_bench.rollout_store import RolloutStore
from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete, selector_state_path

log = logging.getLogger(__name__)

ENV_CONFIG = "LZE_CONFIG"
CLIENT_STATE_KEY = "lze"  # our entry in OpenRLHF's client_states (plain scalars only)


def load_run_config(path: str | os.PathLike):
    """A run directory's config.yaml as a DictConfig."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.exists():
        raise LzeBenchError(f"{ENV_CONFIG}={str(path)!r} does not exist; start runs with `lze-bench train backend=openrlhf`")
    return OmegaConf.load(path)


def build_run_selector(cfg, num_prompts: int):
    """The selector of a saved config, re-typed with its dataclass schema, with the run's per-prompt columns."""
    from omegaconf import OmegaConf

    from lze_bench.metadata import read_columns
    from lze_bench.plugins import selector_class
    from lze_bench.selectors import build_selector

    # inside the trainer actor: a plug-in is registered here from the config's recorded `plugin`
    schema = OmegaConf.structured(selector_class(cfg.selector).Config)
    node = OmegaConf.merge(schema, cfg.selector)
    # the per-prompt columns the launcher recorded from the task's rows (launch.write_metadata)
    return build_selector(node, num_prompts=num_prompts, batch_size=int(cfg.trainer.batch_size),
                          metadata=read_columns(cfg.run_dir) if cfg.get("run_dir") else {})


REPLAY_STORE_DIR = "replay_store"
PENDING_DIR = "pending"  # groups a selector held for the next step (SPEED), per checkpoint


class RunContext:
    def __init__(self, cfg, *, num_prompts: int, flops, plan: LaunchPlan | None = None, features=None):
        """`plan`: the run's launch plan (from_env reads the recorded one; built from cfg when not given)."""
        self.cfg = cfg
        self.plan = plan or launch_plan(cfg)
        self.run_dir = Path(cfg.run_dir)
        self.total_steps = int(cfg.trainer.steps)
        self.group_size = int(cfg.trainer.n_samples)
        self.unit = self.plan.trim_unit
        self.dp_ranks = self.plan.dp_ranks
        self.selector = build_run_selector(cfg, num_prompts)
        self.features = features
        self.store = RolloutStore(self.plan.rollout_store_groups)
        self.driver = StepDriver(
            self.selector,
            DataOrder(num_prompts, int(cfg.seed)),
            seed=int(cfg.seed),
            batch_size=int(cfg.trainer.batch_size),
            candidates_per_step=cfg.data.candidates_per_step,
            max_rounds=int(cfg.backend.max_gen_rounds),
            group_size=self.group_size,
            features=features,
            store=self.store,
        )
        self.flops = flops
        self.ledger = Ledger(self.run_dir)
        self.rollouts = RolloutLog(self.run_dir)
        self.tracker = None  # lze_bench.tracking.Tracker, opened at the first ledger row
        self.saved = True  # the state after the last ledger row is a checkpoint (or the start, or a resume point)

    @classmethod
    def from_env(cls, num_prompts: int, *, features_factory=None) -> "RunContext":
        """Inside the trainer actor: config from LZE_CONFIG, the launch plan the run recorded, FLOP model from
        the policy's HF config.

        `features_factory(cfg, flops, plan)` builds the selector's FeatureFn (features.ActorFeatures)."""
        from transformers import AutoConfig

        from lze_bench.flops import FlopModel

        from lze_bench import env

        cfg = load_run_config(env.run_config_path())
        plan = load_plan(cfg.run_dir)
        flops = FlopModel.from_hf_config(AutoConfig.from_pretrained(cfg.model.path))
        features = features_factory(cfg, flops, plan) if features_factory is not None else None
        return cls(cfg, num_prompts=num_prompts, flops=flops, plan=plan, features=features)

    @property
    def stop_reason(self) -> str | None:
        """"budget" | "steps" once the run is done (lze_bench.budget: trainer.flop_budget, trainer.steps), else None."""
        from lze_bench.budget import stop_reason

        return stop_reason(self.cfg.trainer, self.driver.step, self.ledger.cum_flops)

    @property
    def finished(self) -> bool:
        """No further step: the run is done, or Slurm warned of a stop and the last step written is saved (a
        warning seen after a step's checkpoint decision lets one more step run, which is then saved)."""
        return self.stop_reason is not None or (self.preempted and self.saved)

    @property
    def preempted(self) -> bool:
        """Slurm's warning signal reached the job (lze_bench.preemption's PREEMPT marker, written by rank 0)."""
        from lze_bench.preemption import requested

        return requested(self.run_dir)

    @property
    def steps_done(self) -> int:
        return self.driver.step

    @property
    def replays(self) -> bool:
        return self.store.capacity > 0

    def checkpoint_due(self) -> bool:
        """After the step just written to the ledger: the last step, every `trainer.checkpoint_every` steps, a
        `trainer.checkpoint_every_flops` crossing (lze_bench.budget; a function of the ledger, so resume-safe), or
        any step once Slurm has warned of a stop (lze_bench.preemption)."""
        from lze_bench.budget import checkpoint_due

        frame = self.ledger.frame
        after = self.ledger.cum_flops
        before = float(frame["cum_flops"].iloc[-2]) if len(frame) > 1 else 0.0
        # a preemption warning: this step is saved, so the requeued job resumes right after it
        return checkpoint_due(self.cfg.trainer, self.driver.step, before, after) or self.preempted

    def begin_step(self) -> None:
        """Before the driver runs the next step: the feature passes book their costs against it."""
        if self.features is not None:
            self.features.begin_step(self.driver.step)

    def needs_response_entropy(self) -> bool:
        return "response_entropy" in tuple(getattr(self.selector, "requires", ()))

    def add_response_features(self, groups: list) -> None:
        """Response entropies of freshly rolled-out groups, when the selector uses them (hive)."""
        if not groups or not self.needs_response_entropy():
            return
        if self.features is None:
            raise LzeBenchError(f"selector={self.selector.name} needs response_entropy; the trainer has no feature passes")
        from lze_bench.backends.openrlhf.features import response_spans

        experiences = [e for g in groups for e in g.payload]
        values = self.features.response_entropy(*response_spans(experiences))
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        bounds = np.cumsum([0] + [len(g.payload) for g in groups])  # groups may differ in size (ragged)
        for g, group in enumerate(groups):
            group.response_entropy = values[bounds[g]:bounds[g + 1]]

    def plan_update(self, record) -> bool:
        """Decide which responses of the step's update groups train (trim.py); True if any does."""
        groups = record.train_groups
        masks = trained_masks(self.selector, choices=record.train_choices, kept_groups=record.train_kept,
                              n=self.group_size, rolled_out=record.prompts_rolled_out, unit=self.unit,
                              seed=int(self.cfg.seed), step=record.step)
        record.train_masks = list(masks)
        if self.features is not None:
            flops, seconds = self.features.take_costs()
            record.flops_select += int(flops)
            record.time_select_s += float(seconds)
        return bool(groups) and any(m.any() for m in masks)

    def write_step(self, record, status: dict) -> dict:
        """Append the step's ledger row and rollout rows (both atomic)."""
        row = ledger_row(
            record,
            status,
            self.flops,
            ppo_epochs=int(self.cfg.trainer.ppo_epochs),
            reference_pass=self.plan.reference_model,
        )
        self.rollouts.append(record.step, rollout_rows(record))
        row = self.ledger.append(row)
        self.saved = False
        self._track(row, status)
        return row

    def _track(self, row: dict, status: dict) -> None:
        """Send the row and OpenRLHF's own metrics to `logger=[...]` (lze_bench.tracking), from this actor.

        Opened at the first row (after a resume has cut the ledger back), closed after the last step;
        the key and mode come from this actor's environment, never from a flag."""
        from lze_bench.tracking import open_tracker

        if self.tracker is None:
            from omegaconf import OmegaConf

            start = (int(row["step"]), float(row["cum_flops"]) - float(row["flops_total"]))  # where this run resumed
            self.tracker = open_tracker(OmegaConf.to_container(self.cfg, resolve=True), self.run_dir, resume=start)
        self.tracker.log_step(row, status)
        if self.finished:  # the step cap or the FLOP budget: the run's last row
            self.tracker.close()

    def save_selector_state(self, steps_done: int) -> Path:
        from lze_bench.selectors.base import save_state

        path = selector_state_path(self.run_dir, steps_done)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        save_state(tmp, self.selector.state_dict())
        os.replace(tmp, path)
        if self.replays:
            self._save_store(steps_done)
        if self.driver.pending:
            self._save_pending(steps_done)
        self.saved = True  # called at every checkpoint (the trainer's _checkpoint_if_due)
        return path

    def _store_path(self, steps_done: int) -> Path:
        return self.run_dir / REPLAY_STORE_DIR / f"step_{int(steps_done):06d}.pt"

    def _save_store(self, steps_done: int) -> None:
        from lze_bench import state_file  # read back by torch.load(weights_only=True): no code runs on resume

        state_file.save({"capacity": self.store.capacity, "groups": list(self.store.groups.values())},
                        self._store_path(steps_done))

    def _load_store(self, steps_done: int) -> None:
        from lze_bench import state_file

        path = self._store_path(steps_done)
        if not path.exists():
            raise LzeBenchError(f"resume at step {steps_done}: missing replay store {path}; use a new run_dir")
        try:
            groups = list(state_file.load(path, run_file_fix(self.run_dir))["groups"])
        except (RuntimeError, EOFError, OSError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as exc:
            # checked before the store changes, so a failed resume leaves both the file and the store as they were
            raise damaged_file(path, exc, run_file_fix(self.run_dir)) from exc
        self.store.groups.clear()
        for group in groups:
            self.store.put(group)

    def _pending_path(self, steps_done: int) -> Path:
        return self.run_dir / PENDING_DIR / f"step_{int(steps_done):06d}.pt"

    def _save_pending(self, steps_done: int) -> None:
        """The held groups (step_rounds.Held: our Group with its OpenRLHF samples, the selector's batch row, the
        rollouts still to generate) the next step starts from; a torch file, since the samples hold tensors."""
        from lze_bench import state_file

        state_file.save(list(self.driver.pending), self._pending_path(steps_done))

    def _load_pending(self, steps_done: int, expected: int) -> list:
        from lze_bench import state_file

        if expected == 0:
            return []
        path = self._pending_path(steps_done)
        if not path.exists():
            raise LzeBenchError(f"resume at step {steps_done}: missing held groups {path}; use a new run_dir")
        try:
            return list(state_file.load(path, run_file_fix(self.run_dir)))
        except (RuntimeError, EOFError, OSError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as exc:
            raise damaged_file(path, exc, run_file_fix(self.run_dir)) from exc

    def client_state(self) -> dict:
        return dict(self.driver.position())

    def restore(self, checkpoint_states: dict) -> None:
        """Resume: data order, step, selector state and replay store of the checkpoint OpenRLHF loaded."""
        global_step = int(checkpoint_states.get("global_step", 0) or 0)
        position = checkpoint_states.get(CLIENT_STATE_KEY)
        if global_step == 0 and not position:
            self._begin_features(0)
            self.ledger.truncate_after(-1)
            self.rollouts.truncate_after(-1)
            return
        if position is None:
            raise LzeBenchError(
                f"the OpenRLHF checkpoint in {self.run_dir}/openrlhf/ckpt was not written by lze-bench "
                "(no selector position); use a new run_dir"
            )
        from lze_bench.selectors.base import load_state

        self.driver.restore(position, self._load_pending(int(position["step"]), int(position.get("pending", 0))))
        steps_done = self.steps_done
        state_path = selector_state_path(self.run_dir, steps_done)
        if not state_path.exists():
            raise LzeBenchError(f"resume at step {steps_done}: missing {state_path}; use a new run_dir")
        self.selector.load_state_dict(load_state(state_path))
        if self.replays:
            self._load_store(steps_done)
        self._begin_features(steps_done)
        self.ledger.truncate_after(steps_done - 1)
        self.rollouts.truncate_after(steps_done - 1)
        log.info("resumed at step %d (epoch %d)", steps_done, self.driver.order.epoch)

    def _begin_features(self, steps_done: int) -> None:
        """Tell the feature passes where the run (re)starts (astral's embeddings charge; features.py)."""
        if self.features is not None:
            self.features.resume_step = int(steps_done)
            self.features.begin_step(int(steps_done))

    def adopt_checkpoint(self, steps_done: int, hf_dir: Path) -> Path | None:
        """Move OpenRLHF's `global_step{N}_hf` to checkpoints/step_S (S = steps done), marked COMPLETE last."""
        target = checkpoint_dir(self.run_dir, steps_done)
        if not Path(hf_dir).is_dir():
            log.warning("no HF checkpoint at %s for step %d", hf_dir, steps_done)
            return None
        if target.exists():  # a rerun of the same step after a requeue: the newer save wins
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(hf_dir, target)
        mark_checkpoint_complete(target)
        return target


def finish_run(run_dir: str | os.PathLike, trainer) -> str:
    """After OpenRLHF returns: check the run reached its budget or step cap, compact the rollout log, write DONE
    last (with `stopped_by`, as the local backend's); returns stopped_by."""
    from lze_bench.budget import stop_reason
    from lze_bench.rundir import mark_done

    ledger = Ledger(run_dir)
    steps, cum_flops = ledger.last_step + 1, ledger.cum_flops
    stopped_by = stop_reason(trainer, steps, cum_flops)
    if stopped_by is None:
        budget = "" if trainer.flop_budget is None else f" and {cum_flops:.3g} of {trainer.flop_budget:.3g} FLOPs"
        raise LzeBenchError(f"run stopped after {steps} of {trainer.steps} steps{budget}; "
                            "rerun the same command to resume")
    if stopped_by == "steps" and trainer.flop_budget is not None:
        log.warning("%s hit the step cap trainer.steps=%d before trainer.flop_budget=%.3g (cum_flops %.3g)",
                    run_dir, trainer.steps, trainer.flop_budget, cum_flops)
    RolloutLog(run_dir).compact()
    frame = ledger.frame
    mark_done(run_dir, {"steps": steps, "backend": "openrlhf", "stopped_by": stopped_by,
                        "flop_budget": trainer.flop_budget, "cum_flops": cum_flops,
                        "cum_time_s": float(frame["cum_time_s"].iloc[-1]) if len(frame) else 0.0})
    return stopped_by
