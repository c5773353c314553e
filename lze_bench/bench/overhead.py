"""`lze-bench bench overhead overrides=FILE`: lze-bench's step wall time on backend=openrlhf against OpenRLHF's own
`train_ppo_ray` given the same flags, both measured in this one command, over several rounds.

    lze-bench bench overhead overrides=FILE [out=runs/bench/overhead] [rounds=4] [steps=6] [skip=1]
                             [timeout_s=3600]

FILE is a YAML list of `lze-bench train` overrides for a `backend=openrlhf` run (model, data, cluster shape,
backend.*); the bench adds `selector=uniform`, `trainer.steps=steps`, `logger=[tensorboard]` and its own run
directory. Each round runs two jobs, one after the other, on the same Ray cluster (`LZE_RAY_ADDRESS`, or each
starts its own):

1. lze-bench: the job's own driver command (`openrlhf/command.json`, through `backend.driver_wrapper` if set);
2. plain OpenRLHF: `python -m openrlhf.cli.train_ppo_ray` with the same OpenRLHF flags (the same wrapper), except
   its own checkpoint folder, no resume, `--logger.tensorboard_dir` for its step times, and `--data.max_samples`
   / `--train.num_episodes` so that it runs at least `steps` steps (only its first `steps` are timed).

The order alternates (round 1 lze-bench first, round 2 OpenRLHF first, ...), so a drift in the machine's load
or a warm file cache favours neither. Round k's folders are `out/round_k/lze` and `out/round_k/openrlhf`.

Step wall time of one job: the median interval between consecutive steps' TensorBoard events (each written
once per step, when the step's logs are written; overhead_timing.py), over the steps after the first `skip`
(engine warm-up). Round k's ratio is lze-bench's median over OpenRLHF's; the ratio row is the mean of the
rounds' ratios with a 95 % Student-t interval over rounds (rounds are independent repetitions, so the interval
reflects the spread between repetitions, load changes included). More rounds or more steps narrow it; a note
says when its half-width exceeds 3 %. `rounds=1` is a smoke run: one ratio, no interval (its bounds are left
empty and a note says so). The phase rows split the step with OpenRLHF's own timers, which both
drivers log (generation, make_experience, ppo_train, broadcast, and the rest of the interval), each the mean over
rounds of the job's median: where lze-bench's extra time goes. The load rows give os.getloadavg() before and
after each job: a loaded machine widens the interval and shifts both drivers.

Plain OpenRLHF samples unseeded and selects nothing, so the two runs draw different tokens: compare on a job whose
responses are short and few. Nothing is overwritten: `out` must not exist. On a CPU machine the OpenRLHF engines
need the test harness's stand-ins (`backend.driver_wrapper=[python, tests/openrlhf_cpu/run_entry.py]`, env
LZE_TEST_ENGINE=vllm LZE_TEST_POLICY=deepspeed; tests/test_openrlhf_vllm.py runs it that way).
docs/harness-overhead.md has a measured breakdown.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lze_bench import env
from lze_bench.bench import BenchResult
from lze_bench.bench.overhead_timing import OUTSIDE, PHASES, RunTiming, run_timing, t_interval
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCH_COMMANDS

OPENRLHF_CLI = "openrlhf.cli.train_ppo_ray"
# flags of the lze-bench job that would make plain OpenRLHF resume, write into lze-bench's run directory or stop
# at another number of steps
_DROPPED = {"--ckpt.load_enable": 0, "--ckpt.path": 1, "--ckpt.output_dir": 1, "--data.max_samples": 1,
            "--train.num_episodes": 1}
WIDE_PCT = 3.0  # an interval half-width above this gets a note


def _read_overrides(path: str | None) -> list[str]:
    if not path:
        raise LzeBenchError("bench overhead: pass overrides=FILE (a YAML list of lze-bench train overrides for a "
                            "backend=openrlhf run)")
    from omegaconf import OmegaConf

    file = Path(path)
    if not file.is_file():
        raise LzeBenchError(f"bench overhead: overrides={path}: no such file")
    items = OmegaConf.to_container(OmegaConf.load(file))
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise LzeBenchError(f"bench overhead: overrides={path} must hold a YAML list of KEY=VALUE strings")
    return items


def _int_option(options: dict, name: str, default: int, least: int, why: str) -> int:
    text = options.get(name, str(default))
    try:
        value = int(text)
    except ValueError:
        raise LzeBenchError(f"bench overhead: {name}={text} is not an integer; pass {name}=N with N >= {least}")
    if value < least:
        raise LzeBenchError(f"bench overhead: {name}={value} is below {least} ({why}); pass {name}={least} or more")
    return value


def episodes_for(steps: int, batch: int, prompts: int) -> tuple[int, int]:
    """(max_samples, num_episodes) that make plain OpenRLHF run at least `steps` steps of `batch` prompts from a
    prompt file of `prompts` rows: a prefix of the file when it holds enough, else whole passes over it."""
    if steps * batch <= prompts:
        return steps * batch, 1
    per_pass = max(1, prompts // batch)
    return prompts, math.ceil(steps / per_pass)


def plain_flags(flags: list[str], work: Path, max_samples: int, episodes: int = 1) -> list[str]:
    """lze-bench's OpenRLHF flags for plain OpenRLHF: its own checkpoints under `work`, no resume, a TensorBoard
    folder, `max_samples` prompts and `episodes` passes (so it runs at least as many steps)."""
    out, i = [], 0
    while i < len(flags):
        if flags[i] in _DROPPED:
            i += 1 + _DROPPED[flags[i]]
            continue
        out.append(flags[i])
        i += 1
    return [*out, "--ckpt.path", str(work / "ckpt"), "--ckpt.output_dir", str(work / "final"),
            "--logger.tensorboard_dir", str(work / "tensorboard"), "--data.max_samples", str(max_samples),
            "--train.num_episodes", str(episodes)]


def _prompt_rows(flags: list[str]) -> int:
    """Rows of the prompt file lze-bench prepared for OpenRLHF (`--data.prompt_dataset`)."""
    path = Path(flags[flags.index("--data.prompt_dataset") + 1])
    with path.open() as handle:
        return sum(1 for line in handle if line.strip())


def _run(argv: list[str], environment: dict, log: Path, timeout_s: float) -> dict:
    """Run one job; its wall time and the 1-minute load average before and after it."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with log.open("w") as handle:
        done = subprocess.run(argv, env=environment, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout_s)
    if done.returncode != 0:
        raise LzeBenchError(f"bench overhead: {argv[argv.index('-m') + 1]} exited {done.returncode}; see {log}")
    return {"wall_s": time.perf_counter() - started, "load_before": load_before, "load_after": os.getloadavg()[0]}


def _timed(timing: RunTiming, name: str, steps: int, skip: int) -> RunTiming:
    if len(timing.intervals) < 2:
        raise LzeBenchError(f"bench overhead: {name} logged {len(timing.intervals)} timed steps of {steps}; "
                            f"raise steps= above skip={skip} + 1")
    return timing


def order_of_round(k: int) -> list[str]:
    """The drivers of round k (1-based) in the order they run: lze-bench first in odd rounds, so that a drift in
    load or a warm file cache favours neither over an even number of rounds."""
    return ["lze", "openrlhf"] if k % 2 else ["openrlhf", "lze"]


def _round(cfg_overrides: list[str], out: Path, k: int, steps: int, skip: int, timeout_s: float) -> dict:
    """Round k: both jobs, lze-bench first when k is odd (1-based), their timings and load figures."""
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.config import compose

    folder = out / f"round_{k}"
    cfg = compose("train", [*cfg_overrides, f"run_dir={folder / 'lze'}"])
    paths, argv = prepare(cfg)
    address = env.ray_address()  # plain OpenRLHF's ray.init() joins the same cluster
    environment = env.child_env({env.PLAIN_RAY_ADDRESS: address} if address else None)
    flags = argv[argv.index("--") + 1:]
    wrapper = argv[: argv.index("-m") - 1]
    batch = int(cfg.trainer.batch_size)
    plain = [*wrapper, sys.executable, "-m", OPENRLHF_CLI,
             *plain_flags(flags, folder / "openrlhf", *episodes_for(steps, batch, _prompt_rows(flags)))]
    jobs = {"lze": (argv, folder / "lze.log"), "openrlhf": (plain, folder / "openrlhf.log")}
    order = order_of_round(k)
    runs = {name: _run(jobs[name][0], environment, jobs[name][1], timeout_s) for name in order}
    lze = _timed(run_timing(paths.run_dir / "tensorboard", recursive=False, prefix="openrlhf/", steps=steps,
                            skip=skip), "lze-bench", steps, skip)
    plain_timing = _timed(run_timing(folder / "openrlhf" / "tensorboard", recursive=True, prefix="train/",
                                     steps=steps, skip=skip), "openrlhf", steps, skip)
    return {"k": k, "first": order[0], "runs": runs, "lze": lze, "openrlhf": plain_timing,
            "load": (runs[order[0]]["load_before"], runs[order[1]]["load_after"])}


def _mean_phase(rounds: list[dict], driver: str, name: str) -> float | None:
    values = [r[driver].phase_s(name) for r in rounds]
    return None if None in values else statistics.fmean(values)


def _rows(rounds: list[dict]) -> list[dict]:
    rows = []
    for r in rounds:
        lze, plain = r["lze"].step_s, r["openrlhf"].step_s
        rows.append({"row": f"round {r['k']} ({'lze-bench' if r['first'] == 'lze' else 'openrlhf'} first)",
                     "lze_bench_s": lze, "openrlhf_s": plain, "extra_s": lze - plain, "ratio": lze / plain,
                     "steps_timed": f"{len(r['lze'].intervals)}/{len(r['openrlhf'].intervals)}",
                     "load_1m_before": r["load"][0], "load_1m_after": r["load"][1]})
    mean, low, high = t_interval([row["ratio"] for row in rows])
    low, high = (None, None) if math.isnan(low) else (low, high)  # one round: no interval (JSON has no NaN)
    extra = statistics.fmean(row["extra_s"] for row in rows)
    rows.append({"row": "step (mean over rounds)", "lze_bench_s": statistics.fmean(r["lze"].step_s for r in rounds),
                 "openrlhf_s": statistics.fmean(r["openrlhf"].step_s for r in rounds), "extra_s": extra,
                 "ratio": mean, "ratio_ci95_low": low, "ratio_ci95_high": high})
    for name in (*PHASES, OUTSIDE):
        lze, plain = _mean_phase(rounds, "lze", name), _mean_phase(rounds, "openrlhf", name)
        rows.append({"row": f"phase {name}", "lze_bench_s": lze, "openrlhf_s": plain,
                     "extra_s": None if None in (lze, plain) else lze - plain})
    return rows


@BENCH_COMMANDS.add("overhead")
def bench_overhead(options: dict[str, str]) -> BenchResult:
    from lze_bench.config import compose

    rounds = _int_option(options, "rounds", 4, 1, "a round is one job of each driver")
    steps = _int_option(options, "steps", 6, 1, "steps per job")
    skip = _int_option(options, "skip", 1, 0, "warm-up steps left untimed")
    if steps < skip + 2:
        raise LzeBenchError(f"bench overhead: steps={steps} leaves fewer than 2 timed steps after skip={skip}; "
                            f"pass steps={skip + 2} or more")
    out = Path(options.get("out", "runs/bench/overhead"))
    if out.exists():
        raise LzeBenchError(f"bench overhead: out={out} exists; pass a new out=DIR or delete it (nothing is "
                            "overwritten)")
    timeout_s = float(options.get("timeout_s", 3600))
    cfg_overrides = [*_read_overrides(options.get("overrides")), "selector=uniform", f"trainer.steps={steps}",
                     "logger=[tensorboard]"]
    cfg = compose("train", [*cfg_overrides, f"run_dir={out / 'round_1' / 'lze'}"])
    if cfg.backend.name != "openrlhf":
        raise LzeBenchError("bench overhead: the overrides must select backend=openrlhf")
    done = [_round(cfg_overrides, out, k, steps, skip, timeout_s) for k in range(1, rounds + 1)]
    rows = _rows(done)
    return BenchResult(title=f"harness overhead on backend=openrlhf: {cfg.model.path}", rows=rows,
                       notes=_notes(rows, rounds, steps, skip, out))


def _notes(rows: list[dict], rounds: int, steps: int, skip: int, out: Path) -> list[str]:
    """What the table's figures are, the overhead in one line, the machine, and a warning where the interval is
    wider than WIDE_PCT."""
    from lze_bench.backends.local.warmstart import cpu_model

    summary = rows[rounds]
    wide = []  # the warning, last
    notes = [f"step wall time: median interval between consecutive steps' TensorBoard events over steps {skip}.."
             f"{steps - 1} (0-based) of each job; ratio: mean over {rounds} rounds of lze-bench's median / "
             "OpenRLHF's, 95 % Student-t interval over rounds; order alternates by round"]
    if rounds == 1:
        notes.append(f"harness overhead per step: {summary['ratio']:.3f}x, {summary['extra_s']:+.3f} s a step; one "
                     "round: no interval (rounds=2 or more gives a 95 % interval over rounds)")
    else:
        _, extra_low, extra_high = t_interval([row["extra_s"] for row in rows[:rounds]])
        half_width_pct = 100 * (summary["ratio_ci95_high"] - summary["ratio_ci95_low"]) / 2 / summary["ratio"]
        notes.append(f"harness overhead per step: {summary['ratio']:.3f}x [{summary['ratio_ci95_low']:.3f}, "
                     f"{summary['ratio_ci95_high']:.3f}] (+-{half_width_pct:.1f} %), {summary['extra_s']:+.3f} s a "
                     f"step [{extra_low:+.3f}, {extra_high:+.3f}] (goal <= 1.05 on CPU, <= 1.02 on GPU)")
        if not half_width_pct <= WIDE_PCT:
            wide.append(f"the interval's half-width is {half_width_pct:.1f} % (> {WIDE_PCT:g} %): "
                        "raise rounds= or steps=, or run on an idle machine")
    notes += ["phase rows: OpenRLHF's own timers (timing/*), mean over rounds of each job's median; "
              f"{OUTSIDE} = interval - timing/step_total (log and checkpoint hook, experience hand-over)",
              f"machine: {cpu_model()}, {os.cpu_count()} CPUs; load_1m_*: os.getloadavg() before the round's first "
              "job and after its second",
              f"runs: {out}/round_K/lze and {out}/round_K/openrlhf, driver logs beside them"]
    return notes + wide
