"""File writes taken off a training step's critical path: one thread writes them, in the order they were asked.

A step of the OpenRLHF backend appends its ledger row and its rollout rows; each append serializes a Parquet
file and fsyncs it (lze_bench.ledger, rundir.atomic_write_bytes): ~20 ms a step on 2 shared cores, 2 % of the
CPU test job's ~1 s step (docs/harness-overhead.md). The trainer actor spends the rest of the step waiting for
the policy and engine actors, so the writes can run then. The in-memory ledger stays synchronous (the
checkpoint and budget rules read it); only the files lag, by at most the writes still queued. `drain()` waits
for all of them and is called before every checkpoint and after the last step, so a checkpoint never exists
without the ledger and rollout rows of its steps on disk; a crash can lose only rows of steps after the last
checkpoint, which a resume drops anyway (Ledger.truncate_after). A failed write is raised in the training
thread, at the next write or drain.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class BackgroundWrites:
    def __init__(self, name: str = "lze-writes"):
        self._jobs: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, write: Callable, *args) -> None:
        """Queue `write(*args)`; its arguments must not change afterwards (pass fresh frames, not ones mutated
        later)."""
        self._raise()
        self._jobs.put((write, args))

    def drain(self) -> None:
        """Return once every queued write is done; raise the first failure."""
        self._jobs.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _work(self) -> None:
        while True:
            write, args = self._jobs.get()
            try:
                if self._error is None:  # after a failure, later writes are skipped: the files stay consistent
                    write(*args)
            except BaseException as exc:  # handed to the training thread
                self._error = exc
            finally:
                self._jobs.task_done()
