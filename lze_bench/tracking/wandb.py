"""`logger=[wandb]`: one Weights & Biases run per run directory (wandb imported only when enabled).

Axes (W&B's `define_metric`, docs.wandb.ai "Customize log axes"): each
section's `<section>/cum_flops` is the x-axis of its metrics (`ledger/*` and
the backend's `openrlhf/*` share `ledger/cum_flops`; `eval/*` and `heldout/*`
have their own), so curves of runs that spend compute differently line up at
equal compute; `ledger/step` and `ledger/cum_time_s` (wall time) are defined
too, to be picked in the UI.

Names: project `tracking.project` (else env WANDB_PROJECT, else "lze-bench"),
entity `tracking.entity` (else WANDB_ENTITY / your default), group
`tracking.group` (a sweep: its name), run name `tracking.name` (else the run
directory's name), job_type the selector, tags `tracking.tags` plus
`selector:NAME`, `seed:N`, `backend:NAME` (pair runs by seed in the UI), config
the resolved run config. Mode and key are W&B's own environment (`WANDB_MODE`,
`WANDB_API_KEY`, `wandb login`); nothing here reads or writes a key. Files go
to `<run_dir>/wandb/` (offline runs: `wandb sync <run_dir>/wandb/offline-run-*`).
Console capture is off: the run's output is not copied into W&B's files.
"""

from __future__ import annotations

import json
import math
import secrets
from pathlib import Path

from lze_bench import env
from lze_bench.errors import LzeBenchError
from lze_bench.registry import LOGGERS

STATE_FILE = "tracking.json"  # wandb_id, next_step, events: later invocations and evals continue the same W&B run
OFFLINE_MODES = ("offline", "disabled", "dryrun")
NO_KEY = ("no W&B API key: export WANDB_API_KEY (never in the config) or run `wandb login`; "
          "without internet use WANDB_MODE=offline")


def read_state(run_dir: Path) -> dict:
    path = Path(run_dir) / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def write_state(run_dir: Path, state: dict) -> None:
    from lze_bench.rundir import atomic_write_json

    atomic_write_json(Path(run_dir) / STATE_FILE, state)


def run_id(run_dir: Path) -> str:
    """The W&B run id of a run directory, created (8 random characters) on first use."""
    state = read_state(run_dir)
    if not state.get("wandb_id"):
        state["wandb_id"] = secrets.token_hex(4)
        write_state(run_dir, state)
    return str(state["wandb_id"])


def superseded(event: list, resume: tuple[int, float]) -> bool:
    """Whether a logged event ([W&B step, section, step, ...]) is re-run by a training invocation that
    starts after `resume[0]` updates: ledger rows from that step on, held-out evals past it."""
    updates = int(resume[0])
    return (event[1] == "ledger" and event[2] >= updates) or (event[1] == "heldout" and event[2] > updates)


def rewind_point(state: dict, resume: tuple[int, float] | None) -> int | None:
    """The W&B step of the first event a resumed training invocation re-runs, or None (nothing to rewind)."""
    if resume is None:
        return None
    dropped = [event[0] for event in state.get("events", []) if superseded(event, resume)]
    return min(dropped) if dropped else None


@LOGGERS.add("wandb")
class WandbLogger:
    module = "wandb"  # import name, checked before a run starts
    extra = "wandb"  # pip install 'lze-bench[wandb]'

    @staticmethod
    def preflight() -> None:
        """Online mode needs a key in W&B's own places (env, netrc); checked before anything starts."""
        if env.wandb_mode() in OFFLINE_MODES:
            return
        import wandb

        if wandb.setup().settings.mode in OFFLINE_MODES:  # `wandb offline` (W&B's settings file)
            return
        if not wandb.login(prompt=False, verify=False):
            raise LzeBenchError(f"logger=[wandb]: {NO_KEY}")

    def __init__(self, run_dir: Path, container: dict, resume: tuple[int, float] | None = None):
        """`resume` = (updates, cum_flops) a training invocation starts from: when steps it re-runs were logged
        before, the W&B run is rewound to just before the first of them (W&B's `resume_from`), so the history
        holds each step once, in order; eval events logged after that point are sent again (`resend`)."""
        import wandb

        self.run_dir = Path(run_dir)
        self.state = read_state(self.run_dir)
        rewind = rewind_point(self.state, resume)
        events = self.state.get("events", [])
        self.resend = [] if rewind is None else [key for e in events if e[0] >= rewind and e[1] == "eval" for key in e[3]]
        if rewind == 0:  # nothing of the old W&B run is kept (W&B keeps the step it rewinds to): a new run
            write_state(self.run_dir, {k: v for k, v in self.state.items() if k not in ("wandb_id", "events")})
        identity = run_id(self.run_dir)
        self.state = {**read_state(self.run_dir), "events": [e for e in events if rewind is None or e[0] < rewind]}
        if rewind is not None:
            self.state["next_step"] = rewind
        # W&B's `resume_from=ID?_step=S` keeps the history through step S and continues at S + 1
        where = ({"resume_from": f"{identity}?_step={rewind - 1}"} if rewind else {"id": identity, "resume": "allow"})

        tracking = dict(container.get("tracking") or {})
        selector = str((container.get("selector") or {}).get("name", ""))
        backend = str((container.get("backend") or {}).get("name", ""))
        tags = [*(tracking.get("tags") or []), f"selector:{selector}", f"seed:{container.get('seed')}",
                f"backend:{backend}"]
        try:
            self.run = wandb.init(
                dir=str(run_dir), **where,
                project=tracking.get("project") or env.wandb_project(),
                entity=tracking.get("entity"), group=tracking.get("group"),
                name=tracking.get("name") or Path(run_dir).name, job_type=selector or None,
                tags=list(dict.fromkeys(tags)), config=container, settings=wandb.Settings(console="off"),
            )
        except wandb.errors.Error as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            hint = NO_KEY if "API key" in detail else "see W&B's message"
            raise LzeBenchError(f"logger=[wandb]: {detail} ({hint})") from exc
        self.defined: set[str] = set()

    def _define(self, section: str, metrics: dict) -> None:
        axis = f"{section}/cum_flops"
        if axis not in self.defined:
            self.run.define_metric(axis)
            self.defined.add(axis)
            if section == "ledger":
                self.run.define_metric("ledger/step")
                self.run.define_metric("ledger/cum_time_s")
        for prefix in {name.split("/", 1)[0] for name in metrics} - self.defined:
            self.run.define_metric(f"{prefix}/*", step_metric=axis)
            self.defined.add(prefix)

    def log(self, section: str, metrics: dict, step: int, cum_flops: float, keys: list | None = None) -> None:
        """One event at the next W&B step, recorded in tracking.json (W&B step, section, step, eval keys) so a
        later resume knows where to rewind to. W&B's step is ours, not its counter: a rewind restarts it."""
        self._define(section, metrics)
        payload = {**metrics, f"{section}/step": step}
        if math.isfinite(cum_flops):
            payload[f"{section}/cum_flops"] = cum_flops
        at = int(self.state.get("next_step", 0))
        self.run.log(payload, step=at)
        self.state.setdefault("events", []).append([at, section, int(step), list(keys or [])])
        self.state["next_step"] = at + 1
        write_state(self.run_dir, {**read_state(self.run_dir), "events": self.state["events"],
                                   "next_step": self.state["next_step"]})

    def close(self) -> None:
        self.run.finish()
