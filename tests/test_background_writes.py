"""lze_bench.background_writes: the OpenRLHF trainer's ledger and rollout files written off the step's path."""

from __future__ import annotations

import threading

import pandas as pd
import pytest

from lze_bench.background_writes import BackgroundWrites
from lze_bench.ledger import Ledger, read_ledger


def test_writes_run_in_order_off_the_calling_thread_and_drain_waits_for_them():
    done, threads, gate = [], set(), threading.Event()

    def write(i):
        gate.wait(5)  # held until the caller has queued them all: submit does not wait for the write
        threads.add(threading.current_thread().name)
        done.append(i)

    writes = BackgroundWrites()
    for i in range(5):
        writes.submit(write, i)
    assert done == []
    gate.set()
    writes.drain()
    assert done == [0, 1, 2, 3, 4] and threads == {"lze-writes"}


def test_a_failed_write_is_raised_in_the_caller_at_the_next_drain_and_later_writes_are_skipped():
    done = []

    def write(i):
        if i == 1:
            raise OSError("disk full")
        done.append(i)

    writes = BackgroundWrites()
    for i in range(3):
        writes.submit(write, i)
    with pytest.raises(OSError, match="disk full"):
        writes.drain()
    assert done == [0]  # 2 came after the failure: skipped, so the files stay as the failure left them
    writes.submit(write, 3)  # raised once; the next writes run
    writes.drain()
    assert done == [0, 3]


def test_a_ledger_with_queued_writes_has_every_row_in_memory_and_on_disk_after_drain(tmp_path):
    from lze_bench.ledger import LEDGER_COLUMNS, write_parquet

    writes = BackgroundWrites()
    ledger = Ledger(tmp_path, write=lambda path, frame: writes.submit(write_parquet, path, frame))
    row = {c: 0 for c in LEDGER_COLUMNS if c not in ("flops_total", "cum_flops", "cum_time_s", "heldout_accuracy")}
    for step in range(3):
        ledger.append({**row, "step": step, "flops_rollout": 10, "time_step_s": 1.0})
    assert list(ledger.frame["step"]) == [0, 1, 2] and ledger.cum_flops == 30.0  # read by the checkpoint rules
    writes.drain()
    on_disk = read_ledger(tmp_path)
    pd.testing.assert_frame_equal(on_disk, ledger.frame)
