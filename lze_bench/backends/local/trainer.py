"""`lze-bench train backend=local`: run directory, warm start, resume, the step loop, DONE.

Run directory (design.md "The run directory"; rundir.py): `config.yaml`
(resolved config + version + git commit + the warm start used),
`ledger.parquet` (every LEDGER_COLUMNS column each step, plus `flops_eval`,
`loss`, `kl`, `clip_frac`, `grad_norm`, `seq_len_mean`), the rollout log,
`heldout.jsonl` (every held-out eval with its per-level accuracy; `updates` =
updates done, 0 = the initial policy), `checkpoints/step_K/`,
`selector_state/step_K.npz`, `DONE`.

Step numbering (shared with the OpenRLHF backend): ledger/rollout rows carry
the 0-based step `t` the selectors see; the checkpoint after update `t` is
`checkpoints/step_{t+1}` (K = updates done); the held-out accuracy in row `t`
is that of the policy after update `t`.

Stopping (design.md "Equal compute"): with `trainer.flop_budget` set, the run
ends at the first step boundary where the ledger's `cum_flops` reaches the
budget, and `trainer.steps` is a cap; DONE records which one stopped it
(`stopped_by: budget|steps`). Held-out evals: after every `eval_every` steps,
after each step whose `cum_flops` crosses a multiple of `eval_every_flops`
(so selectors that spend different FLOPs per step are measured at the same
compute), and always after the last step. Checkpoints likewise: every
`checkpoint_every` steps, at each `checkpoint_every_flops` crossing, and after
the last step (lze_bench.budget, shared with the OpenRLHF backend). Every
decision is a function of the ledger, so a resumed run stops, evaluates and
checkpoints where an unbroken one does.

Trackers (`logger=[wandb,tensorboard]`, lze_bench.tracking): every ledger row
and every held-out eval is sent as it is written.

Resume: the same command on an unfinished run directory continues from its
last complete checkpoint: ledger, rollout log and heldout.jsonl are cut back to
it and the steps after it are run again, so no step is missing or doubled. A
finished run directory (DONE) is refused; a run directory holding a different
config is refused (`backend.threads` and `backend.stop_after_steps` may differ).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from lze_bench import __version__, preemption
from lze_bench.budget import checkpoint_due, crossed, stop_reason
from lze_bench.errors import LzeBenchError, damaged_file
from lze_bench.ledger import run_file_fix, step_flops
from lze_bench.rundir import (CONFIG, atomic_write_text, clear_progress, config_hash, default_run_dir, git_commit,
                              latest_checkpoint, list_checkpoints, mark_done, refuse_finished, write_progress)

log = logging.getLogger(__name__)

HELDOUT_FILE = "heldout.jsonl"
# backend knobs that do not change a run's numbers, so a resume may change them: stop_after_steps only slices
# the run; threads is proven by tests/test_warmstart.py::test_the_thread_count_changes_no_number_of_an_rl_run
# (1 and 2 threads: equal ledgers and weights). The warm start is another matter: its build depends on the
# thread count and the processor, so it is shipped, or keyed on both (warmstart.py).
_VOLATILE = ("threads", "stop_after_steps")


def _identity(container: dict) -> str:
    data = {k: v for k, v in container.items()}
    data["backend"] = {k: v for k, v in container["backend"].items() if k not in _VOLATILE}
    return config_hash(data)


def resolve_run_dir(cfg) -> Path:
    from lze_bench.config import config_dict

    return Path(cfg.run_dir) if cfg.run_dir else default_run_dir(config_dict(cfg))


def dry_run(cfg) -> None:
    """Print the resolved config and where the run would write; run nothing."""
    import typer
    from omegaconf import OmegaConf

    typer.echo(OmegaConf.to_yaml(cfg, resolve=True), nl=False)
    typer.echo(f"# run directory: {resolve_run_dir(cfg)}")


def _write_config(run_dir: Path, container: dict, extra: dict) -> None:
    import yaml

    path = run_dir / CONFIG
    identity = _identity(container)
    if path.exists():
        try:
            old = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise damaged_file(path, exc, run_file_fix(run_dir)) from exc
        backend = old.get("backend") if isinstance(old, dict) else None
        other_backend = isinstance(backend, dict) and backend.get("name") not in (None, "local")
        # identity is written last, so a file cut short loses it or keeps only part of the hash
        whole = isinstance(old, dict) and len(str(old.get("identity", ""))) == len(identity)
        if not other_backend and not whole:  # cut short, or emptied
            raise damaged_file(path, ValueError("no whole 'identity' key"), run_file_fix(run_dir))
        if other_backend or old["identity"] != identity:
            raise LzeBenchError(f"run_dir {str(run_dir)!r} holds a run with a different config; "
                                "pass a new run_dir=PATH (or rerun with that run's exact overrides to resume it)")
    body = {**container, "version": __version__, "git_commit": git_commit(), **extra, "identity": identity}
    atomic_write_text(path, yaml.safe_dump(body, sort_keys=False))


def _read_heldout(run_dir: Path, max_updates: int) -> list[dict]:
    path = run_dir / HELDOUT_FILE
    if not path.exists():
        return []
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in rows if r["updates"] <= max_updates]
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise damaged_file(path, exc, run_file_fix(run_dir)) from exc


def _write_heldout(run_dir: Path, rows: list[dict]) -> None:
    atomic_write_text(run_dir / HELDOUT_FILE, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def train(cfg) -> Path:
    from lze_bench.config import config_dict, to_objects
    from lze_bench.runlock import hold_run_dir

    objects = to_objects(cfg)
    run_dir = resolve_run_dir(cfg)
    refuse_finished(run_dir)
    from lze_bench.tracking import preflight

    preflight(objects.logger)  # a missing package or W&B key fails before the warm start
    from lze_bench.plugins import selector_class

    # a backend setting the selector cannot honour fails before the warm start too
    selector_class(objects.selector).check_run(objects.selector, max_gen_rounds=objects.backend.max_gen_rounds)
    if objects.model.path:
        from lze_bench.hub import hub_model_path

        hub_model_path(objects.model.path)  # before torch loads: a hub id that cannot load fails at once
    fresh = not run_dir.exists() or not any(run_dir.iterdir())
    with hold_run_dir(run_dir, "train"):  # one process per run directory (runlock.py)
        refuse_finished(run_dir)  # again, under the lock: a run that just finished is not started again
        from lze_bench.backends.local.model import setup_torch

        setup_torch(objects.backend.threads)
        from lze_bench.grading import Grader

        try:
            with Grader(timeout_s=5.0, workers=objects.backend.grade_workers) as grader:
                session = _Session(objects, config_dict(cfg), run_dir, grader)
                session.run()
        except BaseException:
            if fresh:
                _forget_unstarted(run_dir)
            raise
    return run_dir


def _forget_unstarted(run_dir: Path) -> None:
    """A new run that failed before its first step leaves nothing behind: its config.yaml would make the
    corrected command (same run_dir=, other overrides) refuse the directory as "a different config"."""
    from lze_bench.ledger import LEDGER_FILE
    from lze_bench.runlock import lock_path

    if (run_dir / LEDGER_FILE).exists() or list_checkpoints(run_dir):
        return  # something trained: keep it, a rerun resumes it
    locks = {lock_path(run_dir, "train").name, lock_path(run_dir, "train").name + ".holder"}
    for child in run_dir.iterdir():  # the folder was empty before: all of this is the failed setup's
        if child.name in locks:
            continue
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _is_shipped(directory: Path) -> bool:
    from lze_bench.backends.local.shipped import store

    return Path(directory).resolve().parent == store().resolve()


class _Session:
    """One invocation of a run: set up (or resume), loop, finish."""

    def __init__(self, cfg, container: dict, run_dir: Path, grader):
        self.cfg, self.container, self.run_dir, self.grader = cfg, container, run_dir, grader

    def _policy_source(self, device) -> tuple[Path | str, dict]:
        from lze_bench.backends.local.warmstart import ensure_warmstart, policy_backend, read_info

        if self.cfg.model.path:
            return self.cfg.model.path, {"warmstart": None}

        def report(done, total, note):  # `sweep status` shows it while the ledger is still empty
            write_progress(self.run_dir, "warm start", done, total, note)

        backend = policy_backend(self.cfg.backend, self.cfg.seed)
        directory = ensure_warmstart(self.cfg.model, self.cfg.task, backend, device, self.grader, report)
        info = read_info(directory)
        summary = {k: info.get(k) for k in ("key", "recipe_key", "steps", "time_s", "flops", "parameters",
                                            "heldout_accuracy", "heldout_by_level", "built_on")}
        summary["init_seed"], summary["shipped"] = backend.init_seed, _is_shipped(directory)
        return directory, {"warmstart": {"dir": str(directory), **summary}}

    def setup(self):
        """Everything the first step needs, built in the order each piece depends on the ones before it."""
        from lze_bench.backends.local.model import resolve_device
        from lze_bench.data_order import DataOrder

        self.device = resolve_device(self.cfg.device)
        self.run_dir.mkdir(parents=True, exist_ok=True)  # first: the warm start reports into it
        self.initial = self._write_run_config()
        resume = latest_checkpoint(self.run_dir)
        self.updates = resume[0] if resume else 0
        self._load_policy(resume[1] if resume else None)
        rows = self._load_data()
        prompts = self._encode_prompts(rows)
        selector = self._build_selector(rows)
        self.optimizer = self._optimizer()
        store = self._rollout_store(selector)
        stream = DataOrder(len(rows), self.cfg.seed)
        features = self._features(rows, prompts)
        begun_epoch, pending = self._resume_from_checkpoint(resume is not None, selector, store, stream, features)
        self._open_tracker()
        self.selector, self.store, self.stream, self.features = selector, store, stream, features
        self.runner = self._step_runner(rows, prompts, begun_epoch, pending)

    def _write_run_config(self) -> Path | str:
        """config.yaml with the warm start used and the machine computing; returns the initial policy."""
        from lze_bench.backends.local.warmstart import build_numerics, cpu_model

        initial, extra = self._policy_source(self.device)
        # where this invocation computes: the report names it (thread count and processor change the numbers)
        extra["machine"] = {**build_numerics(self.device.type), "cpu_model": cpu_model()}
        _write_config(self.run_dir, self.container, extra)
        return initial

    def _load_policy(self, checkpoint: Path | None) -> None:
        """The policy to train: the resume checkpoint's, else the initial one; and its FLOP model."""
        from lze_bench.backends.local.model import load_policy
        from lze_bench.flops import FlopModel

        try:
            model, tokenizer = load_policy(checkpoint or self.initial, self.device, self.cfg.model.dtype)
        except LzeBenchError as exc:
            if checkpoint is None:
                raise
            raise damaged_file(checkpoint, exc, f"delete {checkpoint} to resume from the checkpoint before it, or "
                                                "start the run over in another run_dir=PATH") from exc
        self.model, self.tokenizer = model, tokenizer
        self.flop_model = FlopModel.from_torch_model(model)

    def _load_data(self) -> list[dict]:
        """The training rows (returned) and the held-out rows, checked against the data a resumed run used."""
        from lze_bench.fingerprint import check_data, fingerprint
        from lze_bench.tasks.synthetic import load_split

        cfg = self.cfg
        rows = load_split("train", cfg.task)
        self.test_rows = load_split("test", cfg.task)[: cfg.backend.eval_size]
        # before the resume cuts anything back: a refused resume leaves the run directory as it was
        check_data(self.run_dir, {"train": fingerprint(rows), "heldout": fingerprint(self.test_rows)},
                   f"task={cfg.task.name}")
        return rows

    def _encode_prompts(self, rows: list[dict]) -> list:
        """The training prompts as token ids; refused when a prompt plus its response outgrows the model."""
        from lze_bench.backends.local.heldout import encode_prompts

        trainer = self.cfg.trainer
        prompts = encode_prompts(self.tokenizer, [r["problem"] for r in rows])
        longest = max(len(p) for p in prompts) + trainer.max_new_tokens
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and longest > limit:
            raise LzeBenchError(f"trainer.max_new_tokens={trainer.max_new_tokens}: prompts plus responses reach "
                                f"{longest} tokens, past the model's {limit} positions; lower it")
        return prompts

    def _build_selector(self, rows: list[dict]):
        """The selector, and the per-prompt metadata columns it reads, written to the run directory."""
        from lze_bench.metadata import PromptMetadata
        from lze_bench.selectors import build_selector

        cfg, trainer = self.cfg, self.cfg.trainer
        metadata = PromptMetadata.for_run(rows, cfg.task.name, cfg.selector)
        selector = build_selector(cfg.selector, num_prompts=len(rows), batch_size=trainer.batch_size, metadata=metadata)
        metadata.write(self.run_dir, list(type(selector).metadata_columns(selector.config)))
        return selector

    def _optimizer(self):
        import torch

        trainer = self.cfg.trainer
        return torch.optim.AdamW(self.model.parameters(), lr=trainer.lr, weight_decay=trainer.weight_decay)

    def _rollout_store(self, selector):
        """The store of past rollout groups a selector may ask for again, sized for it."""
        from lze_bench.backends.local.state import RolloutStore

        from lze_bench.rollout_store import store_capacity

        cfg = self.cfg
        return RolloutStore(store_capacity(cfg.backend.rollout_store_groups,
                                           getattr(selector.config, "buffer_size", 0), cfg.trainer.batch_size))

    def _features(self, rows: list[dict], prompts: list):
        """What selectors read about prompts: the policy's own features, or ASTRAL's learned head over them."""
        from lze_bench.backends.local.features import Features

        cfg = self.cfg
        features = Features(self.model, prompts, self.flop_model, self.tokenizer.pad_token_id, cfg.trainer.temperature,
                            self.run_dir, self._load_initial, cfg.backend.gen_chunk_size)
        if getattr(cfg.selector, "predictor", "kernel") != "kernel":  # ASTRAL's learned head (lze_bench/predictor)
            from lze_bench.backends.local.predictor import head_features

            features = head_features(cfg, [r["problem"] for r in rows], features, self.run_dir, self.device,
                                     self.grader)
        return features

    def _resume_from_checkpoint(self, resuming: bool, selector, store, stream, features) -> tuple[int, list]:
        """Ledger, rollout log and held-out evals cut back to the resume point, with the checkpoint's state
        loaded into optimizer, selector, store, stream and features; returns (begun epoch, pending groups)."""
        from lze_bench.backends.local.state import load_checkpoint
        from lze_bench.ledger import Ledger, RolloutLog

        begun_epoch, pending = -1, []
        self.ledger, self.rollouts = Ledger(self.run_dir), RolloutLog(self.run_dir)
        if resuming:
            state = load_checkpoint(self.run_dir, self.updates, self.optimizer, selector, store)
            stream.load_state_dict(state["stream"])
            begun_epoch = int(state["begun_epoch"])
            pending = state.get("pending", [])  # groups a selector held for the next step (SPEED)
            features.embeddings_charged = bool(state.get("embeddings_charged", False))
            log.info("resuming %s from checkpoint step_%06d", self.run_dir, self.updates)
        self.rollouts.check_readable(self.updates - 1)  # before anything is cut back or trained
        self.ledger.truncate_after(self.updates - 1)
        self.rollouts.truncate_after(self.updates - 1)
        self.heldout = _read_heldout(self.run_dir, self.updates)
        return begun_epoch, pending

    def _open_tracker(self) -> None:
        from lze_bench.tracking import open_tracker

        # logger=[...], from where this invocation starts (what was logged past it is superseded); closed by run()
        self.tracker = open_tracker(self.container, self.run_dir, resume=(self.updates, self.ledger.cum_flops))

    def _step_runner(self, rows: list[dict], prompts: list, begun_epoch: int, pending: list):
        """The step loop's engine, with the frozen initial policy as KL reference when trainer.kl_coef > 0."""
        from lze_bench.backends.local.step import StepRunner

        ref_model = self._load_initial() if self.cfg.trainer.kl_coef > 0 else None
        return StepRunner(cfg=self.cfg, selector=self.selector, stream=self.stream, model=self.model,
                          tokenizer=self.tokenizer, optimizer=self.optimizer, ref_model=ref_model, grader=self.grader,
                          flop_model=self.flop_model, features=self.features, store=self.store, prompts=prompts,
                          answers=[r["answer"] for r in rows], device=self.device, begun_epoch=begun_epoch,
                          pending=pending)

    def _load_initial(self):
        from lze_bench.backends.local.model import load_policy

        model, _ = load_policy(self.initial, self.device, self.cfg.model.dtype)
        return model.eval()

    def evaluate(self, updates: int, cum_flops: float):
        """Held-out eval of the policy after `updates` updates, at `cum_flops` training FLOPs."""
        from lze_bench.backends.local.heldout import evaluate

        result = evaluate(self.model, self.tokenizer, self.test_rows, self.grader, self.flop_model,
                          max_new_tokens=self.cfg.trainer.max_new_tokens, chunk_size=self.cfg.backend.gen_chunk_size)
        self._book_eval(updates, cum_flops, result)
        return result

    def evaluate_initial(self):
        """The initial policy's held-out eval: the stored one of the same policy, problems, settings and machine
        when another run computed it (lze_bench/backends/local/initial_eval.py), else computed and stored."""
        import dataclasses

        from lze_bench.backends.local import initial_eval
        from lze_bench.backends.local.heldout import HeldoutResult
        from lze_bench.backends.local.warmstart import build_numerics, cache_root

        key = initial_eval.key(self.model, self.tokenizer, self.test_rows,
                               max_new_tokens=self.cfg.trainer.max_new_tokens,
                               chunk_size=self.cfg.backend.gen_chunk_size, grading_mode=self.grader.mode,
                               numerics=build_numerics(self.device.type))
        root = cache_root(self.cfg.backend)
        stored = initial_eval.load(root, key)
        if stored is None:
            result = self.evaluate(0, 0.0)
            initial_eval.store(root, key, dataclasses.asdict(result))
            return result
        result = HeldoutResult(**stored)
        self._book_eval(0, 0.0, result, reused=key)
        return result

    def _book_eval(self, updates: int, cum_flops: float, result, reused: str | None = None) -> None:
        row = {"updates": updates, "accuracy": result.accuracy,
               "by_level": {str(k): v for k, v in result.by_level.items()},
               "problems": result.num_problems, "flops": result.flops, "time_s": round(result.time_s, 3)}
        if reused is not None:
            row["reused"] = reused
        self.heldout = [r for r in self.heldout if r["updates"] != updates] + [row]
        _write_heldout(self.run_dir, self.heldout)
        self.tracker.log_heldout(updates, result.accuracy, result.by_level, cum_flops)

    def stop_reason(self, cum_flops: float) -> str | None:
        """"budget" once `cum_flops` reaches trainer.flop_budget, else "steps" at the step cap (lze_bench.budget)."""
        return stop_reason(self.cfg.trainer, self.updates, cum_flops)

    def _eval_due(self, before: float, after: float, last: bool) -> bool:
        every = self.cfg.trainer.eval_every
        return last or crossed(self.cfg.trainer.eval_every_flops, before, after) or (every > 0 and self.updates % every == 0)

    def checkpoint(self):
        from lze_bench.backends.local.state import save_checkpoint

        state = {"stream": self.stream.state_dict(), "begun_epoch": self.runner.begun_epoch,
                 "embeddings_charged": self.features.embeddings_charged, "updates": self.updates,
                 "pending": self.runner.pending}
        save_checkpoint(self.run_dir, self.updates, self.model, self.tokenizer, self.optimizer, self.selector,
                        self.store, state)

    def run(self) -> None:
        self.tracker = None
        try:
            self._run()
        finally:
            if self.tracker is not None:
                self.tracker.close()

    def _run(self) -> None:
        from lze_bench.backends.local.progress import progress_bar

        self.setup()
        trainer, backend = self.cfg.trainer, self.cfg.backend
        if not any(r["updates"] == 0 for r in self.heldout) and self.updates == 0:
            write_progress(self.run_dir, "initial eval")
            initial = self.evaluate_initial()
            log.info("initial held-out accuracy %.3f %s", initial.accuracy, initial.by_level)
        write_progress(self.run_dir, "training")
        done_here, saved = 0, True  # saved: the state after the last step (or the resume point) is a checkpoint
        with progress_bar(f"train {self.cfg.selector.name}", trainer.steps, completed=self.updates) as advance:
            while self.stop_reason(self.ledger.cum_flops) is None:
                if backend.stop_after_steps and done_here >= backend.stop_after_steps:
                    log.info("stopping after %d steps (backend.stop_after_steps); rerun to resume", done_here)
                    return
                if preemption.requested():  # Slurm's warning: the step just done is saved, the job requeues
                    self._save_for_requeue(saved)
                    return
                saved = self._one_step()
                done_here += 1
                last = self.ledger.frame.iloc[-1]
                acc = last["heldout_accuracy"]
                advance(f"reward {last['reward_mean']:.2f}" + ("" if acc != acc else f"  held-out {acc:.3f}"))
        self.finish()

    def _one_step(self) -> bool:
        """One training step, its ledger row, and its checkpoint when due; True when it checkpointed."""
        step = self.updates
        row, log_rows = self.runner.run(step)
        self.updates += 1
        elapsed = row.pop("_elapsed_s")
        row["heldout_accuracy"], row["flops_eval"], row["time_eval_s"] = float("nan"), 0, 0.0
        before = self.ledger.cum_flops
        after = before + float(step_flops(row))  # what the ledger will book as this step's cum_flops
        last = self.stop_reason(after) is not None
        if self._eval_due(before, after, last):
            result = self.evaluate(self.updates, after)
            row["heldout_accuracy"], row["flops_eval"], row["time_eval_s"] = result.accuracy, result.flops, result.time_s
            elapsed += result.time_s
        row["time_step_s"] = elapsed
        self.tracker.log_step(self.ledger.append(row))
        if log_rows:  # a step whose selector rolled out nothing (all pruned) has no rows
            self.rollouts.append(step, log_rows)
        if checkpoint_due(self.cfg.trainer, self.updates, before, after):
            self.checkpoint()
            return True
        return False

    def _save_for_requeue(self, saved: bool) -> None:
        """A checkpoint of the state after the last step, unless one was just taken: the requeued job resumes
        there, so nothing is lost (the checkpoint schedule's later decisions read the ledger, not this save)."""
        if not saved:
            self.checkpoint()
        log.warning("preemption warning: checkpoint step_%06d saved, stopping for the requeue", self.updates)

    def finish(self) -> None:
        self.rollouts.compact()
        frame = self.ledger.frame
        stopped_by = self.stop_reason(self.ledger.cum_flops)
        if stopped_by == "steps" and self.cfg.trainer.flop_budget is not None:
            log.warning("%s hit the step cap trainer.steps=%d before trainer.flop_budget=%.3g (cum_flops %.3g)",
                        self.run_dir, self.cfg.trainer.steps, self.cfg.trainer.flop_budget, self.ledger.cum_flops)
        first = next((r["accuracy"] for r in self.heldout if r["updates"] == 0), None)
        clear_progress(self.run_dir)  # before DONE, which is written last
        mark_done(self.run_dir, {
            "steps": int(len(frame)), "cum_flops": float(frame["cum_flops"].iloc[-1]) if len(frame) else 0.0,
            "cum_time_s": float(frame["cum_time_s"].iloc[-1]) if len(frame) else 0.0,
            "stopped_by": stopped_by, "flop_budget": self.cfg.trainer.flop_budget,
            "initial_heldout_accuracy": first,
            "final_heldout_accuracy": self.heldout[-1]["accuracy"] if self.heldout else None,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        })
        log.info("run finished: %s", self.run_dir)
