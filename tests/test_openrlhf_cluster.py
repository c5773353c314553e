"""backend=openrlhf on a cluster: fail loudly, never hang, never harm a neighbour.

One test (or two) per failure mode of the Slurm/Ray path and the run state:
Ray's CPU count vs OpenRLHF's placement groups and a bounded placement wait;
Ray from the job's own interpreter; a failed driver is a failed job, requeue
limits and the sbatch script's signal; teardown of this job's Ray only;
abbreviated extra flags; an interrupted first checkpoint; every rolled-out
group in the rollout log; the data-parallel split; trained tokens over PPO
epochs. Slurm and GPUs are not needed: subprocesses are recorded, not run.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lze_bench.backends.openrlhf import ray_cluster, slurm
from lze_bench.backends.openrlhf.accounting import ledger_row, rollout_rows
from lze_bench.backends.openrlhf.command import RunPaths, check, openrlhf_flags
from lze_bench.backends.openrlhf.selection import Group, StepRecord
from lze_bench.config import compose
from lze_bench.errors import LzeBenchError
from lze_bench.flops import FlopModel
from lze_bench.ledger import RolloutLog, read_rollouts

BASE = ["backend=openrlhf", "model=Qwen/Qwen2.5-Math-1.5B", "launcher=slurm", "launcher.gpus_per_node=8",
        "launcher.cpus_per_task=1"]


def cfg_with(tmp_path, *extra):
    return compose("train", [*BASE, f"run_dir={tmp_path / 'run'}", *extra])


def role(rank=0, gpus=8, cpus=1, attempt=0):
    return slurm.NodeRole(rank=rank, num_nodes=1, head_host="node1", job_id="4242", attempt=attempt, gpus=gpus,
                          cpus=cpus)


# 1. Ray CPUs cover what OpenRLHF reserves; placement waits are bounded


def test_ray_cpus_cover_openrlhf_bundles_even_with_one_cpu_per_task(tmp_path, monkeypatch):
    from lze_bench.backends.openrlhf.plan import launch_plan

    cfg = cfg_with(tmp_path)
    assert launch_plan(cfg).ray_cpus == 9  # 8 colocated {"GPU": 1, "CPU": 1} bundles + the PPOTrainer actor
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node1")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    monkeypatch.setattr(ray_cluster.subprocess, "run", lambda *a, **k: type("R", (), {"stdout": "node1\n"})())
    node = slurm.NodeRole.from_env(8, launch_plan(cfg).ray_cpus)
    assert "--num-cpus=9" in ray_cluster.head_command(node, "10.0.0.1")
    separate = cfg_with(tmp_path, "backend.colocate_all=false", "backend.vllm_enable_sleep=false",
                        "backend.ds_enable_sleep=false", "trainer.kl_coef=0.001")
    assert launch_plan(separate).ray_cpus == 8 + 8 + 8 + 1


def test_placement_group_wait_is_bounded():
    ray = pytest.importorskip("ray", reason="ray does not import; install it: bash .ci/openrlhf.sh (CPU) "
                                         "or pip install 'lze-bench[openrlhf]' (GPU nodes)")
    from ray.util.placement_group import placement_group

    from lze_bench.backends.openrlhf.placement import bounded, bounded_placement

    with bounded_placement(5.0) as wrapper:  # what `from ray.util.placement_group import placement_group` finds
        from ray.util.placement_group import placement_group as seen

        assert seen is wrapper
    from ray.util.placement_group import placement_group as restored

    assert restored is placement_group
    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        started = time.monotonic()
        with pytest.raises(LzeBenchError, match="backend.placement_timeout_s"):
            bounded(placement_group, 2.0)([{"GPU": 1, "CPU": 1}])
        assert time.monotonic() - started < 30
        group = bounded(placement_group, 30.0)([{"CPU": 1}])  # placeable: returned ready
        assert ray.get(group.ready(), timeout=1) is not None
    finally:
        ray.shutdown()


# 2. Ray from the job's interpreter


def test_ray_is_started_by_the_jobs_own_python():
    for command in (ray_cluster.head_command(role(), "10.0.0.1"), ray_cluster.worker_command(role(rank=1), "10.0.0.1")):
        assert command[:3] == [sys.executable, "-m", "ray.scripts.scripts"]
        assert "start" in command and "--block" in command


# 3. failure is failure; requeue limits; the script's signal requeues


def test_nonzero_driver_exit_fails_the_submitit_job(monkeypatch, tmp_path):
    from lze_bench.backends.openrlhf.plan import command_path, launch_plan
    from lze_bench.rundir import atomic_write_json

    run = tmp_path / "run"  # prepared: the job reads its launch plan from command.json
    atomic_write_json(command_path(run), {"argv": ["driver"], "plan": launch_plan(cfg_with(tmp_path)).to_dict()})
    asked = []
    monkeypatch.setattr(slurm.NodeRole, "from_env", classmethod(lambda cls, gpus, cpus=1: asked.append((gpus, cpus))
                                                                or role()))
    monkeypatch.setattr(slurm, "job_hosts", lambda: ["node1"])
    monkeypatch.setattr(slurm, "node_main", lambda run_dir, node, peers=(): 3)
    with pytest.raises(LzeBenchError, match="exited with code 3"):
        slurm.OpenRLHFJob()(str(run))
    monkeypatch.setattr(slurm, "node_main", lambda run_dir, node, peers=(): 0)
    assert slurm.OpenRLHFJob()(str(run)) == 0
    assert asked == [(8, 9), (8, 9)]  # the plan's GPUs and Ray CPUs


def test_submit_passes_max_requeue_and_srun_cpus_to_submitit(monkeypatch, tmp_path):
    import submitit

    from lze_bench.backends.openrlhf import launch

    seen = {}

    class FakeExecutor:
        def __init__(self, folder, **kwargs):
            seen.update(kwargs)

        def update_parameters(self, **params):
            seen["params"] = params

        def submit(self, fn, *args):
            seen["args"] = args
            return type("Job", (), {"job_id": "77"})()

    cfg = cfg_with(tmp_path, "launcher.max_requeue=5")
    monkeypatch.setattr(submitit, "SlurmExecutor", FakeExecutor)
    monkeypatch.setattr(launch, "prepare", lambda c, plan: (RunPaths(tmp_path / "run"), ["python"]))
    launch._submit(cfg, launch.launch_plan(cfg))
    assert seen["max_num_timeout"] == 5 and "max_requeue" not in seen["params"]
    assert seen["args"] == (str(tmp_path / "run"),)  # the job reads GPUs and Ray CPUs from the recorded plan
    # the job step gets the CPUs Ray needs (Slurm 22.05-23.02 would give it one) and dies with a failed task
    assert seen["params"]["srun_args"] == ["--cpus-per-task=9", "--kill-on-bad-exit=1"]


def test_script_signal_requeues_after_the_step_is_saved_until_max_requeue(monkeypatch, tmp_path):
    """The warning signal is recorded (PREEMPT marker for the trainer actor), the process goes on; once the
    driver has returned, rank 0 requeues an unfinished run, while restarts < max_requeue."""
    from lze_bench import preemption
    from lze_bench.rundir import mark_done

    calls = []
    run = lambda command, **kw: calls.append(command)  # noqa: E731
    assert slurm.requeue("4242", 0, 2, run=run) and calls == [["scontrol", "requeue", "4242"]]
    assert not slurm.requeue("4242", 2, 2, run=run) and len(calls) == 1
    monkeypatch.setattr(slurm.subprocess, "run", run)
    previous = signal.getsignal(signal.SIGUSR2)
    with preemption.deferred(tmp_path):
        assert not slurm.requeue_if_preempted(tmp_path, role(attempt=1), max_requeue=3)  # no signal yet
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.1)  # still running: the handler only records it
        assert (tmp_path / preemption.MARKER).exists() and preemption.requested(tmp_path)
    assert signal.getsignal(signal.SIGUSR2) == previous
    assert not slurm.requeue_if_preempted(tmp_path, role(attempt=1, rank=1), max_requeue=3)  # rank 0 decides
    assert slurm.requeue_if_preempted(tmp_path, role(attempt=1), max_requeue=3)
    assert calls[-1] == ["scontrol", "requeue", "4242"] and len(calls) == 2
    mark_done(tmp_path)  # the step in hand was the last: nothing to requeue
    assert not slurm.requeue_if_preempted(tmp_path, role(attempt=1), max_requeue=3)
    preemption.clear(tmp_path)


def test_sbatch_script_says_how_it_requeues(tmp_path):
    from lze_bench.backends.openrlhf.launch import dry_run
    import io

    out = io.StringIO()
    dry_run(cfg_with(tmp_path, "launcher.max_requeue=4", "launcher.signal_delay_s=300"), out=out)
    text = out.getvalue()
    assert "#SBATCH --signal=USR2@300" in text and "#SBATCH --requeue" in text  # the warning the step is saved in
    assert "scontrol requeue" in text and "max_requeue=4" in text and "ray stop" not in text.replace("never `ray stop`", "")


# 4. teardown stops only this job's Ray


class FakeProc:
    def __init__(self, command, **kwargs):
        self.command, self.terminated, self.returncode = command, False, None
        FakeProc.started.append(self)

    def poll(self):
        return self.returncode

    def terminate(self):
        self.terminated, self.returncode = True, -15

    def wait(self, timeout=None):
        return self.returncode

    kill = terminate


def test_teardown_terminates_this_jobs_ray_and_never_runs_ray_stop(monkeypatch, tmp_path):
    FakeProc.started = []
    ran = []
    monkeypatch.setattr(ray_cluster.subprocess, "Popen", FakeProc)
    monkeypatch.setattr(ray_cluster.subprocess, "run", lambda command, **kw: ran.append(command) or
                        type("R", (), {"returncode": 0})())
    monkeypatch.setattr(ray_cluster, "head_address", lambda host, peers=(): "10.0.0.1")
    monkeypatch.setattr(ray_cluster, "_wait_for_nodes", lambda *a, **k: None)
    monkeypatch.setattr(ray_cluster, "load_driver_argv", lambda run_dir: ["driver"])
    monkeypatch.setattr(ray_cluster, "POLL_S", 0.01)
    assert ray_cluster.node_main(tmp_path, role()) == 0
    marker = ray_cluster.done_marker(tmp_path, role())
    assert marker.exists()
    assert ray_cluster.node_main(tmp_path, role(rank=1)) == 0  # the worker sees the marker and stops its own Ray
    assert all(p.terminated for p in FakeProc.started) and len(FakeProc.started) == 2
    assert all("stop" not in command for command in ran + [p.command for p in FakeProc.started])


def test_ray_ports_stay_between_rays_worker_ports_and_the_ephemeral_range():
    for job in ("1", "4242", "9999", "123456", "87654321", "3191", "3192"):
        port = slurm.NodeRole(rank=0, num_nodes=1, head_host="n", job_id=job, attempt=0, gpus=1, cpus=1).port
        assert 20000 <= port and port + 3 < 32768, job  # ports port..port+3
    assert role().port != slurm.NodeRole(rank=0, num_nodes=1, head_host="n", job_id="4243", attempt=0, gpus=1,
                                         cpus=1).port


def test_head_address_is_never_loopback(monkeypatch, tmp_path):
    """Debian maps a host's own name to 127.0.1.1: the head then finds the address it reaches its peers with."""
    FakeProc.started = []
    answers = {"node1": "127.0.1.1", "node2": "10.0.0.2"}
    monkeypatch.setattr(ray_cluster.socket, "getaddrinfo",
                        lambda host, port, family=0, *a: [(family, 2, 17, "", (answers.get(host, host), port or 0))])

    class Probe:  # a UDP "connect" sends nothing; it only picks the route's source address
        def __init__(self, *args):
            pass

        def connect(self, target):
            self.target = target

        def getsockname(self):
            return ("10.0.0.1", 40000) if self.target[0] == "10.0.0.2" else ("127.0.0.1", 40000)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(ray_cluster.socket, "socket", Probe)
    assert ray_cluster.head_address("node1", ["node2"]) == "10.0.0.1"
    answers["node1"] = "10.0.0.1"
    assert ray_cluster.head_address("node1", []) == "10.0.0.1"
    answers.update(node1="127.0.1.1", node2="127.0.0.1")
    with pytest.raises(LzeBenchError, match="resolves only to loopback"):
        ray_cluster.head_address("node1", ["node2"])
    # node_main hands the non-loopback address to Ray and the driver
    answers.update(node1="127.0.1.1", node2="10.0.0.2")
    monkeypatch.setattr(ray_cluster.subprocess, "Popen", FakeProc)
    monkeypatch.setattr(ray_cluster.subprocess, "run", lambda command, **kw: type("R", (), {"returncode": 0})())
    monkeypatch.setattr(ray_cluster, "_wait_for_nodes", lambda *a, **k: None)
    monkeypatch.setattr(ray_cluster, "load_driver_argv", lambda run_dir: ["driver"])
    assert ray_cluster.node_main(tmp_path, role(), peers=["node2"]) == 0
    assert "--node-ip-address=10.0.0.1" in FakeProc.started[0].command


def test_ray_and_the_driver_get_a_sane_thread_count(monkeypatch, tmp_path):
    FakeProc.started = []
    envs = []
    monkeypatch.setattr(ray_cluster.subprocess, "Popen", lambda command, **kw: envs.append(kw.get("env")) or FakeProc(command))
    monkeypatch.setattr(ray_cluster.subprocess, "run", lambda command, **kw: envs.append(kw.get("env")) or
                        type("R", (), {"returncode": 0})())
    monkeypatch.setattr(ray_cluster, "head_address", lambda host, peers=(): "10.0.0.1")
    monkeypatch.setattr(ray_cluster, "_wait_for_nodes", lambda *a, **k: None)
    monkeypatch.setattr(ray_cluster, "load_driver_argv", lambda run_dir: ["driver"])
    monkeypatch.setenv("OMP_NUM_THREADS", "64")  # what a 64-CPU task exports
    assert ray_cluster.node_main(tmp_path, role(gpus=8, cpus=64)) == 0
    assert len(envs) == 2 and all(env["OMP_NUM_THREADS"] == "4" for env in envs)  # Ray head, driver


def test_a_worker_leaves_when_the_head_is_gone(monkeypatch, tmp_path):
    """No done marker will ever come: the worker returns non-zero instead of holding its node until the limit."""
    FakeProc.started = []
    monkeypatch.setattr(ray_cluster.subprocess, "Popen", FakeProc)
    monkeypatch.setattr(ray_cluster, "head_address", lambda host, peers=(): "10.0.0.1")
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        if len(polls) > 50:
            raise AssertionError("the worker is still waiting for a head that is gone")

    monkeypatch.setattr(ray_cluster.time, "sleep", sleep)
    monkeypatch.setattr(ray_cluster, "_head_answers", lambda ip, port: False)  # the head's GCS port refuses
    assert ray_cluster.node_main(tmp_path, role(rank=1)) != 0
    assert FakeProc.started[-1].terminated
    monkeypatch.setattr(ray_cluster, "_head_answers", lambda ip, port: True)
    monkeypatch.setattr(FakeProc, "poll", lambda self: 1)  # its own `ray start` exited (the raylet lost the head)
    polls.clear()
    assert ray_cluster.node_main(tmp_path, role(rank=1)) != 0


# 5. abbreviated extra flags


@pytest.mark.parametrize("flag, dest", [("--train.async_e", "--train.async_enable"),
                                        ("--algo.dynamic_filtering_e", "--algo.dynamic_filtering_enable"),
                                        ("'--ckpt.save_st=5'", "--ckpt.save_steps")])
def test_abbreviated_extra_flags_are_refused_by_destination(tmp_path, flag, dest):
    cfg = cfg_with(tmp_path, f"backend.extra_args=[{flag}]")
    with pytest.raises(LzeBenchError, match=f"backend.extra_args: .*{dest}"):
        openrlhf_flags(cfg, RunPaths(tmp_path / "run"))


# 6. an interrupted first checkpoint


def test_unloadable_checkpoint_is_set_aside_and_a_good_one_kept(tmp_path, caplog):
    from lze_bench.backends.openrlhf.checkpoints import fresh_states, set_aside_unloadable

    actor = tmp_path / "ckpt" / "_actor"
    (actor / "global_step1").mkdir(parents=True)
    (actor / "global_step1" / "mp_rank_00_model_states.pt").write_bytes(b"partial")  # no `latest`: interrupted
    moved = set_aside_unloadable(tmp_path / "ckpt")
    assert moved is not None and moved.is_dir() and not actor.exists()
    assert "no loadable state" in caplog.text
    (actor / "global_step2").mkdir(parents=True)
    (actor / "global_step2" / "mp_rank_00_model_states.pt").write_bytes(b"ok")
    (actor / "latest").write_text("global_step2")
    assert set_aside_unloadable(tmp_path / "ckpt") is None and actor.is_dir()
    assert set_aside_unloadable(tmp_path / "nothing") is None
    assert fresh_states()["episode"] == 0 and fresh_states()["global_step"] == 0


# 7. every rolled-out group is logged, and replay still reads the log


def group(prompt_id, rewards):
    rewards = np.asarray(rewards, dtype=np.float32)
    response = np.full(len(rewards), 3, dtype=np.int64)
    return Group(prompt_id, rewards, response, response + 10)


def test_prompt_rolled_out_twice_in_a_step_keeps_both_rows(tmp_path):
    from lze_bench.replay.log import read_log

    record = StepRecord(step=0, prompts_rolled_out=3, gen_rounds=2)
    record.rolled = [group(5, [0, 0]), group(6, [0, 1]), group(5, [1, 0])]  # prompt 5 again after an epoch turn
    record.kept_flags, record.rounds = [False, True, True], [0, 0, 1]
    row = ledger_row(record, {}, FlopModel(matmul_params=10, n_layer=1, d_attn=2), ppo_epochs=1,
                     reference_pass=False)
    log = RolloutLog(tmp_path)
    log.append(0, rollout_rows(record))
    log.compact()
    rows = read_rollouts(tmp_path)
    assert len(rows) == row["prompts_rolled_out"] == 3
    assert int(rows["kept"].sum()) == row["groups_kept"] == 2
    assert sorted(rows["round"]) == [0, 0, 1]
    replayed = read_log(tmp_path / "rollouts.parquet")  # one group per prompt per step: the first round's
    assert sorted(replayed.prompt_id.tolist()) == [5, 6] and replayed.rewards.tolist()[0] == [0.0, 0.0]


# 8. the data-parallel split


def test_micro_batches_must_split_evenly_over_dp_ranks(tmp_path):
    # 6 prompts x 4 = 24 samples on 4 GPUs: train micro 6 divides; rollout micro 4 gives 6 micro-batches,
    # dealt 2, 2, 2, 0 by OpenRLHF: the last rank would get nothing
    cfg = cfg_with(tmp_path, "launcher.gpus_per_node=4", "trainer.batch_size=6", "trainer.n_samples=4",
                   "backend.train_micro_batch_size=6", "backend.rollout_micro_batch_size=4")
    with pytest.raises(LzeBenchError, match="backend.rollout_micro_batch_size: .*evenly over the 4 actor GPUs"):
        check(cfg)
    check(cfg_with(tmp_path, "launcher.gpus_per_node=4", "trainer.batch_size=6", "trainer.n_samples=4",
                   "backend.train_micro_batch_size=6", "backend.rollout_micro_batch_size=3"))


# 9. trained tokens over PPO epochs


def test_trained_tokens_count_every_ppo_epoch():
    record = StepRecord(step=0, prompts_rolled_out=1, gen_rounds=1)
    record.rolled, record.kept_flags, record.rounds = [group(1, [0, 1])], [True], [0]
    flops = FlopModel(matmul_params=10, n_layer=1, d_attn=2)
    one = ledger_row(record, {}, flops, ppo_epochs=1, reference_pass=False)
    three = ledger_row(record, {}, flops, ppo_epochs=3, reference_pass=False)
    assert one["trained_tokens"] == 26 and three["trained_tokens"] == 3 * 26
    assert three["flops_train"] == 3 * one["flops_train"]
