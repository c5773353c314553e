"""A process pool whose watchdog kills and restarts a worker stuck on one item.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop one running
task; killing a worker breaks the whole executor and loses which item hung.
Here each worker reports every item as it finishes, so the parent knows when
the current item started; an item running past `timeout_s` (a hang in C code
that no signal interrupts) or a worker that dies (a segfault from deep
recursion) costs that one item, reported as ("timeout" | "error", why), and a
fresh worker takes the rest of the chunk.

Start method: "forkserver" where available, else "spawn"; never "fork", since
the caller may hold CUDA or threads (torch) that a fork would copy. The fork
server preloads `preload` modules once (lze_bench.grading.warmup
imports math-verify and warms its parser), so a restart costs milliseconds.
Workers ignore SIGINT: Ctrl-C reaches the parent, which closes the pool.

Workers never import the caller's `__main__`: spawn and forkserver children
normally re-run the parent's main script, which breaks (or recurses in) any
script without an `if __name__ == "__main__"` guard. The worker function is
always importable by module name, so `_main_hidden` hides the main module's
file and spec while a worker starts (the same preparation `python -c` gets).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from multiprocessing.connection import wait
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # a worker that is not ready by then is reported as an error
MAX_CHUNK = 32  # items per message: small enough that a restart redoes little


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _context(preload: Sequence[str]):
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        # Always set: the default preload is ["__main__"], the caller's script.
        # Takes effect only if this starts the (process-wide) fork server.
        ctx.set_forkserver_preload(list(preload))
        return ctx
    return mp.get_context("spawn")


_MAIN_LOCK = threading.Lock()


@contextmanager
def _main_hidden():
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _MAIN_LOCK:
        saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
        main.__dict__.pop("__file__", None)
        main.__dict__["__spec__"] = None
        try:
            yield
        finally:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _worker_main(conn, fn: Callable[[Any], Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send("ready")
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for index, item in chunk:
            try:
                result = ("ok", fn(item))
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, item counts as failed
                result = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
            conn.send((index, result))


class _Worker:
    def __init__(self, ctx, fn):
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child_conn, fn), daemon=True)
        with _main_hidden():
            self.process.start()
        child_conn.close()  # so the parent sees EOF when the child dies
        self.conn = parent_conn
        self.ready = False
        self.born = time.monotonic()
        self.chunk: list[tuple[int, Any]] = []
        self.done = 0  # results received for the current chunk
        self.item_started = 0.0

    @property
    def busy(self) -> bool:
        return self.done < len(self.chunk)

    def send(self, chunk: list[tuple[int, Any]]) -> None:
        self.chunk, self.done = chunk, 0
        self.item_started = time.monotonic()
        self.conn.send(chunk)

    def cpu_s(self) -> float:
        """User + system CPU seconds of this worker so far (Linux /proc; NaN elsewhere)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def kill(self) -> None:
        try:
            self.conn.close()
        finally:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=5)


class WatchdogPool:
    """`map(items)` -> [(status, value)] in order: ("ok", fn(item)), ("timeout", why), ("error", why)."""

    def __init__(self, fn: Callable[[Any], Any], *, workers: int = 0, timeout_s: float = 10.0, preload: Sequence[str] = ()):
        self.fn = fn
        self.size = max(1, workers if workers > 0 else available_cores())
        self.timeout_s = float(timeout_s)
        self.ctx = _context(preload)
        self.workers: list[_Worker] = []
        self.restarts = 0
        self._dead_cpu_s = 0.0  # CPU seconds of workers already replaced

    def cpu_seconds(self) -> float:
        """CPU seconds used by this pool's workers (for `lze-bench bench grading`)."""
        return self._dead_cpu_s + sum(worker.cpu_s() for worker in self.workers)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        for worker in self.workers:
            worker.process.join(timeout=2)
            worker.kill()
        self.workers = []

    def map(self, items: Sequence[Any]) -> list[tuple[str, Any]]:
        results: list[tuple[str, Any] | None] = [None] * len(items)
        if not items:
            return []
        while len(self.workers) < self.size:
            self.workers.append(_Worker(self.ctx, self.fn))
        chunk_size = max(1, min(MAX_CHUNK, len(items) // (4 * self.size) or 1))
        queue = deque(
            [(i, items[i]) for i in range(start, min(start + chunk_size, len(items)))]
            for start in range(0, len(items), chunk_size)
        )
        remaining = len(items)
        try:
            while remaining:
                for worker in self.workers:
                    if worker.ready and not worker.busy and queue:
                        worker.send(queue.popleft())
                ready = wait([w.conn for w in self.workers], timeout=self._wait_s())
                for worker in list(self.workers):
                    if worker.conn in ready:
                        remaining -= self._drain(worker, results, queue)
                remaining -= self._watchdog(results, queue)
        except BaseException:  # Ctrl-C or a failed start: workers hold stale chunks, so drop them
            self.close()
            raise
        return results  # type: ignore[return-value]

    def _wait_s(self) -> float:
        now, deadlines = time.monotonic(), []
        for worker in self.workers:
            if worker.busy:
                deadlines.append(worker.item_started + self.timeout_s)
            elif not worker.ready:
                deadlines.append(worker.born + START_TIMEOUT_S)
        return max(0.01, min(deadlines) - now) if deadlines else 0.5

    def _drain(self, worker: _Worker, results: list, queue: deque) -> int:
        """Read every message a worker has sent; returns items finished."""
        finished = 0
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if message == "ready":
                    worker.ready = True
                    continue
                index, result = message
                results[index] = result
                worker.done += 1
                worker.item_started = time.monotonic()
                finished += 1
        except (EOFError, OSError):
            worker.process.join(timeout=1)
            code = worker.process.exitcode
            if not worker.ready:  # a worker that cannot start would be restarted forever
                raise RuntimeError(f"grading worker failed to start (exit code {code})") from None
            finished += self._replace(worker, results, queue, "error", f"worker died (exit code {code})")
        return finished

    def _watchdog(self, results: list, queue: deque) -> int:
        finished, now = 0, time.monotonic()
        for worker in list(self.workers):
            if worker.busy and now - worker.item_started > self.timeout_s:
                why = f"no verdict within {self.timeout_s:.1f} s; worker killed and restarted"
                finished += self._replace(worker, results, queue, "timeout", why)
            elif not worker.ready and now - worker.born > START_TIMEOUT_S:
                raise RuntimeError(f"grading worker did not start within {START_TIMEOUT_S:.0f} s")
        return finished

    def _replace(self, worker: _Worker, results: list, queue: deque, status: str, why: str) -> int:
        """Fail the worker's current item, requeue the rest of its chunk, start a new worker."""
        finished = 0
        if worker.busy:
            index, _ = worker.chunk[worker.done]
            results[index] = (status, why)
            finished = 1
            rest = worker.chunk[worker.done + 1 :]
            if rest:
                queue.appendleft(rest)
        logger.warning("grading pool: %s", why)
        cpu = worker.cpu_s()
        self._dead_cpu_s += cpu if cpu == cpu else 0.0
        worker.kill()
        self.workers[self.workers.index(worker)] = _Worker(self.ctx, self.fn)
        self.restarts += 1
        return finished
