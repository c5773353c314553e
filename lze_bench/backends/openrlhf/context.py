"""The run state the OpenRLHF trainer actor holds (no OpenRLHF import; openrlhf.md §9 "What lives where").

The `PPOTrainer` Ray actor is the single controller: it holds the selector, the
data order, the ledger writer and the checkpoint links. It learns the run from
env `LZE_CONFIG` (the run directory's resolved config.yaml, set by entry.py for
every Ray actor), because OpenRLHF's argparse rejects flags it does not know.

Step numbering (ours, to reconcile with the local backend): ledger and rollout
rows carry the 0-based index `t` of the training step (= `RolloutBatch.step`
and the selectors' `step`); the checkpoint taken after update `t` is named
`checkpoints/step_{t+1:06d}` (= updates done = OpenRLHF's `global_step`; eval
step 0 is the initial policy). Resuming from checkpoint `S` keeps ledger rows
`0..S-1`.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from lze_bench.backends.openrlhf.accounting import ledger_row, rollout_rows
from lze_bench.backends.openrlhf.selection import StepDriver
from lze_bench.data_order import DataOrder
from lze_bench.errors import LzeBenchError
from lze_bench.ledger import Ledger, RolloutLog
from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete, selector_state_path

log = logging.getLogger(__name__)

ENV_CONFIG = "LZE_CONFIG"
ENV_RUN_DIR = "LZE_RUN_DIR"
CLIENT_STATE_KEY = "lze"  # our entry in OpenRLHF's client_states (plain scalars only)


def load_run_config(path: str | os.PathLike):
    """A run directory's config.yaml as a DictConfig."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.exists():
        raise LzeBenchError(f"{ENV_CONFIG}={str(path)!r} does not exist; start runs with `lze-bench train backend=openrlhf`")
    return OmegaConf.load(path)


def build_run_selector(cfg, num_prompts: int):
    """The selector of a saved config, re-typed with its dataclass schema."""
    from omegaconf import OmegaConf

    from lze_bench.registry import SELECTORS
    from lze_bench.selectors import build_selector

    schema = OmegaConf.structured(SELECTORS[cfg.selector.name].Config)
    node = OmegaConf.merge(schema, cfg.selector)
    return build_selector(node, num_prompts=num_prompts, batch_size=int(cfg.trainer.batch_size))


class RunContext:
    def __init__(self, cfg, *, num_prompts: int, flops):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.total_steps = int(cfg.trainer.steps)
        self.checkpoint_every = int(cfg.trainer.checkpoint_every)
        self.selector = build_run_selector(cfg, num_prompts)
        self.driver = StepDriver(
            self.selector,
            DataOrder(num_prompts, int(cfg.seed)),
            seed=int(cfg.seed),
            batch_size=int(cfg.trainer.batch_size),
            candidates_per_step=cfg.data.candidates_per_step,
            max_rounds=int(cfg.backend.max_gen_rounds),
            short_batch=str(cfg.backend.short_batch),
        )
        self.flops = flops
        self.ledger = Ledger(self.run_dir)
        self.rollouts = RolloutLog(self.run_dir)

    @classmethod
    def from_env(cls, num_prompts: int) -> "RunContext":
        """Inside the trainer actor: config from LZE_CONFIG, FLOP model from the policy's HF config."""
        from transformers import AutoConfig

        from lze_bench.flops import FlopModel

        cfg = load_run_config(os.environ.get(ENV_CONFIG, ""))
        flops = FlopModel.from_hf_config(AutoConfig.from_pretrained(cfg.model.path))
        return cls(cfg, num_prompts=num_prompts, flops=flops)

    @property
    def finished(self) -> bool:
        return self.driver.step >= self.total_steps

    def is_checkpoint_step(self, global_step: int) -> bool:
        every = self.checkpoint_every
        return global_step >= self.total_steps or (every > 0 and global_step % every == 0)

    def write_step(self, record, status: dict) -> dict:
        """Append the step's ledger row and rollout rows (both atomic)."""
        row = ledger_row(
            record,
            status,
            self.flops,
            ppo_epochs=int(self.cfg.trainer.ppo_epochs),
            reference_pass=float(self.cfg.trainer.kl_coef) > 0,
        )
        self.rollouts.append(record.step, rollout_rows(record))
        return self.ledger.append(row)

    def save_selector_state(self, global_step: int) -> Path:
        from lze_bench.selectors.base import save_state

        path = selector_state_path(self.run_dir, global_step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        save_state(tmp, self.selector.state_dict())
        os.replace(tmp, path)
        return path

    def client_state(self) -> dict:
        return dict(self.driver.position())

    def restore(self, checkpoint_states: dict) -> None:
        """Resume: data order, step and selector state of the DeepSpeed checkpoint OpenRLHF loaded."""
        global_step = int(checkpoint_states.get("global_step", 0) or 0)
        if global_step == 0:
            self.ledger.truncate_after(-1)
            self.rollouts.truncate_after(-1)
            return
        position = checkpoint_states.get(CLIENT_STATE_KEY)
        if position is None:
            raise LzeBenchError(
                f"the OpenRLHF checkpoint in {self.run_dir}/openrlhf/ckpt was not written by lze-bench "
                "(no selector position); use a new run_dir"
            )
        from lze_bench.selectors.base import load_state

        self.driver.restore(position)
        state_path = selector_state_path(self.run_dir, global_step)
        if not state_path.exists():
            raise LzeBenchError(f"resume at step {global_step}: missing {state_path}; use a new run_dir")
        self.selector.load_state_dict(load_state(state_path))
        self.ledger.truncate_after(global_step - 1)
        self.rollouts.truncate_after(global_step - 1)
        log.info("resumed at step %d (epoch %d)", global_step, self.driver.order.epoch)

    def adopt_checkpoint(self, global_step: int, hf_dir: Path) -> Path | None:
        """Move OpenRLHF's `global_step{N}_hf` to checkpoints/step_N and mark it COMPLETE (written last)."""
        target = checkpoint_dir(self.run_dir, global_step)
        if not Path(hf_dir).is_dir():
            log.warning("no HF checkpoint at %s for step %d", hf_dir, global_step)
            return None
        if target.exists():  # a rerun of the same step after a requeue: the newer save wins
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(hf_dir, target)
        mark_checkpoint_complete(target)
        return target


def finish_run(run_dir: str | os.PathLike, total_steps: int, summary: dict | None = None) -> None:
    """After OpenRLHF returns: check every step is in the ledger, compact the rollout log, write DONE last."""
    from lze_bench.rundir import mark_done

    ledger = Ledger(run_dir)
    if ledger.last_step + 1 < int(total_steps):
        raise LzeBenchError(
            f"run stopped after {ledger.last_step + 1} of {total_steps} steps; rerun the same command to resume"
        )
    RolloutLog(run_dir).compact()
    mark_done(run_dir, summary or {"steps": int(total_steps), "backend": "openrlhf"})
