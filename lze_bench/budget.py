"""When a run stops and when it checkpoints or evaluates: functions of the ledger, the same on every backend.

Equal compute (docs/design.md "Equal compute"): with `trainer.flop_budget = F`
a run ends at the first step whose ledger `cum_flops` reaches `F` (DONE says
`stopped_by: budget`); `trainer.steps` is then only a cap (`stopped_by: steps`
when it comes first). Work at FLOP marks: `trainer.checkpoint_every_flops = C`
takes a checkpoint after each step whose `cum_flops` crosses a multiple of
`C` (`trainer.eval_every_flops` does the same for the local backend's held-out
evals), so checkpoints of selectors that spend different FLOPs per step sit at
the same compute; the last step always checkpoints. Every decision reads only
the ledger (steps done, `cum_flops` before and after the step), so a resumed
run, whose ledger is cut back to its checkpoint, stops and checkpoints exactly
where an unbroken one does.
"""

from __future__ import annotations


def stop_reason(trainer, steps_done: int, cum_flops: float) -> str | None:
    """"budget" once `cum_flops` reaches trainer.flop_budget, else "steps" at the step cap, else None."""
    if trainer.flop_budget is not None and cum_flops >= trainer.flop_budget:
        return "budget"
    return "steps" if steps_done >= trainer.steps else None


def crossed(every: float | None, before: float, after: float) -> bool:
    """Whether going from `before` to `after` FLOPs passes a multiple of `every` (None: never)."""
    return every is not None and int(after // every) > int(before // every)


def checkpoint_due(trainer, steps_done: int, before: float, after: float) -> bool:
    """After a step: the last one, every `checkpoint_every` steps, or a `checkpoint_every_flops` crossing."""
    every = trainer.checkpoint_every
    return (stop_reason(trainer, steps_done, after) is not None or (every > 0 and steps_done % every == 0)
            or crossed(trainer.checkpoint_every_flops, before, after))


def compute_plan(trainer) -> str:
    """Where a run stops and where its HF checkpoints are taken, in one line (dry runs print it)."""
    if trainer.flop_budget is not None:
        stop = (f"stops at the first step whose cum_flops reaches trainer.flop_budget={trainer.flop_budget:.4g} "
                f"(trainer.steps={trainer.steps} is a cap)")
    else:
        stop = f"stops after trainer.steps={trainer.steps} steps"
    marks = []
    if trainer.checkpoint_every > 0:
        marks.append(f"every {trainer.checkpoint_every} steps")
    if trainer.checkpoint_every_flops is not None:
        marks.append(f"at every multiple of {trainer.checkpoint_every_flops:.4g} FLOPs")
    return f"the run {stop}; HF checkpoints {', '.join(marks + ['after the last step'])}"
