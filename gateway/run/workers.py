"""The compression worker pool: where CPU-heavy jobs run, off the event loop, and survive crashes.

MixPR and tiktoken are CPU work, and measured on a 1M-token prompt they hold the GIL for up to
~220 ms at a time (chunking regexes, scikit-learn's tokenizer, tiktoken's merge loop), so worker
*threads* would still freeze every other request. Jobs therefore run in a small pool of worker
*processes* (``compression_executor: process``, the default); ``thread`` remains for tests and
tiny deployments. A job gets plain picklable arguments and returns plain results.

Each worker is its own one-process ``ProcessPoolExecutor``, and the pool hands jobs to idle
workers itself. Then a worker that dies (the OOM killer) or runs past ``timeout_s`` (killed, so it
stops burning CPU) breaks only its own executor: the job it held is known, retried once elsewhere
(a crash; a timeout would just time out again), and that one worker is replaced in the background.
A shared ``ProcessPoolExecutor`` breaks as a whole: every job in flight fails with
``BrokenProcessPool`` and nothing says which process ran what, so a timeout cannot kill the right
one. loky's reusable executor was tried and measured: it respawns, but a SIGKILLed worker still
fails *every* job in flight (``TerminatedWorkerError`` on both jobs of a 2-worker pool), and it is
one executor per process, which two gateways in one process (the tests) would share and resize.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import functools
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gateway.run.workers")

HOST_POLL_S = 0.5  # how often a forked worker without a pidfd checks that its host is still there
WATCH_INTERVAL_S = 0.25  # how soon a worker that died while idle is noticed and replaced
PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent thread exits
RESPAWN_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)  # between failed attempts to start a replacement
# A process worker runs at this niceness: when compression and the event loop want the same core, the
# loop, which answers the short requests, gets it first (CFS weight 1024 against 335 at nice 5).
WORKER_NICENESS = 5


class JobFailed(Exception):
    """The pool could not run a job: ``cause`` is "crash", "timeout" or "unavailable"."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class _WorkerDied(Exception):
    pass


@dataclass(eq=False)
class _Worker:
    executor: concurrent.futures.Executor
    pid: int | None = None  # None for a thread worker
    busy: bool = False
    retired: bool = False
    owners: set[asyncio.Task[Any]] = field(default_factory=set)

    def alive(self) -> bool:
        # the executor reaps a dead worker at once, so the pid disappears
        return self.pid is None or _alive(self.pid)


class Workers:
    """``workers`` processes (or threads) that run jobs for the event loop, each job at most ``timeout_s``."""

    def __init__(self, *, workers: int, executor: str = "process", timeout_s: float = 30.0,
                 metrics: Any = None) -> None:
        self.size = workers
        self.kind = executor
        self._context = _context(executor)
        self.timeout_s = timeout_s
        self.metrics = metrics  # restarts are counted there; set by whoever serves the pool's figures
        self._workers: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._warm_up: Callable[[], Any] = _noop
        self._respawning: dict[asyncio.Task[None], str] = {}  # replacement being started -> why
        self._failing: str | None = None  # why the last replacement could not be started
        self._watch: asyncio.Task[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._spawning: set[concurrent.futures.Executor] = set()  # workers still importing
        self._closed = False

    async def start(self, warm_up: Callable[..., Any], *args: Any, preload: Sequence[str] = ()) -> None:
        """Start every worker and run ``warm_up`` in it now (imports take seconds), not on the first job;
        returns when all are warm.

        ``preload``: modules the fork server imports once, before it forks the first worker (a
        module may warm what it loads as it is imported); each worker then starts from them.

        Each worker takes jobs as soon as it is warm, so a job that comes during the start waits for
        the first one rather than for all. A worker that cannot be started is retried as a replacement
        would be, and readiness says why (a gateway warming in the background has nobody to raise to).
        A second call waits for the first's workers: the CLI starts the pool while the app still
        imports (``gateway.starting``), and the app's own start then finds it warming.
        """
        if self._starting is None:
            self._warm_up = functools.partial(warm_up, *args)
            _preload(self._context, preload)
            if self.kind == "process":
                self._watch = asyncio.create_task(self._watch_idle())
            self._starting = asyncio.gather(*(self._start_one("warming up") for _ in range(self.size)))
            self._starting.add_done_callback(_retrieved)
        await asyncio.shield(self._starting)

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a worker; a crash is retried once on another, then ``JobFailed``."""
        call = functools.partial(fn, *args, **kwargs)
        for attempt in (1, 2):
            worker = await self._acquire()
            # The job owns its worker until it ends: a caller that gives up (a client left) must
            # not hand a busy worker to the next job, nor leave a stuck one running forever.
            owner = asyncio.create_task(self._run_on(worker, call))
            worker.owners.add(owner)
            owner.add_done_callback(_forget(worker))
            try:
                return await asyncio.shield(owner)
            except _WorkerDied:
                if attempt == 2:
                    raise JobFailed("crash", "a compression worker died twice running this job") from None
                log.warning("a compression worker died mid-job; retrying the job on another worker")
        raise AssertionError("unreachable")

    def pids(self, *, busy: bool | None = None) -> list[int]:
        """The worker processes' pids (all, or only the busy or idle ones): for tests and operators."""
        return [w.pid for w in self._workers if w.pid is not None and (busy is None or w.busy == busy)]

    def live(self) -> int:
        """Workers that can take a job now (busy or idle); fewer than ``size`` while some restart."""
        return len(self._workers)

    def problems(self) -> list[str]:
        """What keeps the pool from serving, for readiness: empty while one worker can.

        A worker short is reduced capacity, not unavailability (``live`` goes to /metrics): taking an
        instance out of rotation on every worker crash would turn crashes on several instances at
        once into an outage.
        """
        if self._workers or self._closed:
            return []
        found = []
        if self._respawning:
            reasons = ", ".join(sorted(set(self._respawning.values())))
            found.append(f"compression pool: no worker can serve, {len(self._respawning)} of {self.size} "
                         f"starting ({reasons})")
        if self._failing:
            found.append(f"compression pool: no worker can serve, a worker could not be started "
                         f"({self._failing})")
        return found

    def close(self) -> None:
        self._closed = True
        for task in [self._watch, *self._respawning]:
            if task is not None:
                task.cancel()
        for executor in list(self._spawning):
            _kill_starting(executor)
        for worker in self._workers:
            if worker.busy and worker.pid is not None:
                _kill(worker.pid)  # a stuck job would make the shutdown below wait forever
            # Waiting lets worker processes exit cleanly (no leaked semaphores); queued jobs are dropped.
            worker.executor.shutdown(wait=not worker.busy, cancel_futures=True)
        self._workers.clear()

    # -- one job ------------------------------------------------------------------------------

    async def _acquire(self) -> _Worker:
        while True:
            if self._failing and not self._workers:
                raise JobFailed("unavailable", f"no compression worker could be started ({self._failing})")
            try:  # wake now and then: the last worker may fail to restart while this job waits
                worker = await asyncio.wait_for(self._idle.get(), 1.0)
            except TimeoutError:
                continue
            if not worker.retired:
                worker.busy = True
                return worker

    async def _run_on(self, worker: _Worker, call: Callable[[], Any]) -> Any:
        try:
            job = asyncio.wrap_future(worker.executor.submit(call))
            result = await asyncio.wait_for(job, self.timeout_s)
        except TimeoutError:
            if worker.pid is not None:
                _kill(worker.pid)  # abandoned: it must stop burning a CPU
            self._replace(worker, "timeout")
            raise JobFailed("timeout", f"a compression job ran past {self.timeout_s:g} s") from None
        except BrokenExecutor:
            self._replace(worker, "crash")
            raise _WorkerDied() from None
        except BaseException:
            self._release(worker)  # the job itself raised: the worker is fine
            raise
        self._release(worker)
        return result

    def _release(self, worker: _Worker) -> None:
        worker.busy = False
        if not worker.retired:
            self._idle.put_nowait(worker)

    # -- replacing workers ----------------------------------------------------------------------

    def _replace(self, worker: _Worker, reason: str) -> None:
        """Retire ``worker`` and start a replacement in the background."""
        if worker.retired or self._closed:
            return
        worker.retired = True
        self._workers.remove(worker)
        # A dead or killed process's executor is broken; shutting it down joins its threads.
        worker.executor.shutdown(wait=False, cancel_futures=True)
        log.warning("compression worker %s replaced after a %s", worker.pid, reason)
        if self.metrics is not None:
            self.metrics.worker_restarts.labels(reason).inc()
        self._start_one("after a worker died" if reason == "crash" else "after a job timed out")

    def _start_one(self, why: str) -> asyncio.Task[None]:
        """A worker started in the background; ``why`` is what readiness says until it is up."""
        task = asyncio.create_task(self._respawn())
        self._respawning[task] = why
        task.add_done_callback(self._respawning.pop)
        return task

    async def _respawn(self) -> None:
        attempt = 0
        while True:  # a pool that stays a worker short would slowly stop serving
            try:
                worker = await self._spawn()
            except Exception as exc:
                self._failing = f"{type(exc).__name__}: {exc}"
                log.error("starting a compression worker failed (%s)", self._failing)
                await asyncio.sleep(RESPAWN_BACKOFF_S[min(attempt, len(RESPAWN_BACKOFF_S) - 1)])
                attempt += 1
                continue
            self._failing = None
            self._add(worker)
            return

    async def _spawn(self) -> _Worker:
        executor = _make_executor(self._context)
        self._spawning.add(executor)
        try:
            parent = os.getpid() if self.kind == "process" else None  # a thread is not a child
            # The fork server's environment is the one it started with: a worker gets the host's now,
            # as a spawned one would.
            env = dict(os.environ) if self.kind == "process" else None
            # In a thread: a process worker starts inside submit, and the fork server answers with its
            # pid only once it has imported its preload (seconds, the first time).
            started = await asyncio.to_thread(executor.submit, _started, parent, self._warm_up, env)
            pid = await asyncio.wrap_future(started)
        except BaseException:
            _kill_starting(executor)  # cancelled (a close) or failed: a worker it forked goes with it
            raise
        finally:
            self._spawning.discard(executor)
        return _Worker(executor, pid if self.kind == "process" else None)

    def _add(self, worker: _Worker) -> None:
        if self._closed:
            worker.executor.shutdown(wait=True, cancel_futures=True)
            return
        self._workers.append(worker)
        self._idle.put_nowait(worker)

    async def _watch_idle(self) -> None:
        """Replace workers that die while idle, so readiness says so and no job lands on them."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            for worker in list(self._workers):
                if not worker.busy and not worker.alive():
                    self._replace(worker, "crash")


def _forget(worker: _Worker) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        worker.owners.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that left must not leave a "never retrieved" warning
    return done


def _retrieved(future: asyncio.Future[Any]) -> None:
    """A start cut short (closed, or the process stopping first) has nobody left awaiting it: its
    CancelledError is retrieved here rather than logged as "never retrieved" at exit."""
    if not future.cancelled():
        future.exception()


def _started(parent: int | None, warm_up: Callable[[], Any], env: dict[str, str] | None = None) -> int:
    """Runs first in every new worker: tie it to the host (a process worker), take the host's
    environment, warm it up, say who it is."""
    if parent is not None:
        die_with_parent(parent, forked=True)
        os.nice(WORKER_NICENESS)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    warm_up()
    return os.getpid()


def die_with_parent(parent: int, *, forked: bool = False) -> None:
    """A host that exits without closing the pool (a LiteLLM proxy has no shutdown hook for its
    guardrails; a gateway killed with SIGKILL) must not leave idle workers behind, orphaned.

    The kernel signals only for a parent that dies *after* ``prctl``: one that died while this
    process was starting (a spawned worker imports for a second or more) has already handed it to
    init, so the parent is checked once more after, and this process ends if it is gone. Never called
    in the host itself (thread workers): it would tie the host's life to its own parent's.

    ``forked``: this process's parent is the host's fork server, which outlives the host as long as
    a worker holds the pipe it watches (every forked child does): so the host itself is watched, and
    this process ends when it does; the server then sees the pipe close and ends too.
    """
    if forked:
        _watch_host(parent)
        return
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def _watch_host(host: int) -> None:
    """End this process when ``host`` ends (at once if it has): a thread waits on the host's pidfd
    (Linux 5.3+), or, without one, asks every ``HOST_POLL_S`` whether it is still there."""
    try:
        watched: int | None = os.pidfd_open(host)
    except (AttributeError, OSError):  # no pidfd here, or the host is gone already
        watched = None
    if not _alive(host):
        os._exit(1)
    threading.Thread(target=_exit_after, args=(host, watched), name="mixpr-host-watch", daemon=True).start()


def _exit_after(host: int, watched: int | None) -> None:
    if watched is not None:
        select.select([watched], [], [])  # readable once the host has exited
    else:
        while _alive(host):
            time.sleep(HOST_POLL_S)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: the host's pid taken by another process
        return False
    return True


def _noop() -> None:
    return None


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_starting(executor: concurrent.futures.Executor) -> None:
    """A worker closed while it still imports and warms: killed, for nothing waits for its job, and the
    process's exit would otherwise wait seconds for its warm-up (a failed start, a stop mid-start).

    The fork server forks a worker before the executor records it, inside ``submit``, which holds the
    executor's lock throughout: the table is taken first, the shutdown waits for that lock, and what
    the table holds then is killed, so a worker forked as the pool closed goes too."""
    processes = getattr(executor, "_processes", None)  # ProcessPoolExecutor's pid -> Process
    executor.shutdown(wait=False, cancel_futures=True)
    for process in list((processes or {}).values()):
        process.kill()


def _context(kind: str) -> Any:
    """Where process workers come from. Not forked from the host: it has threads (LiteLLM's, the
    loop's) that fork would copy mid-state. Spawned, each worker imported MixPR, scikit-learn, the
    tokenizers (and LiteLLM, for the auto router) itself: on two cores, two workers and the host's own
    import took 10 s to readiness (issue 59). The fork server is a clean single-threaded process that
    imports them once (``preload``) and forks each worker from there, in milliseconds."""
    return None if kind == "thread" else multiprocessing.get_context("forkserver")


def _preload(context: Any, modules: Sequence[str]) -> None:
    """Set the fork server's ``modules`` if it has not started yet (one server serves every pool of
    this process; one started earlier keeps its own, and its workers import the rest as they warm)."""
    from multiprocessing import forkserver

    if context is not None and modules and not _server_running(forkserver):
        context.set_forkserver_preload(list(modules))


def _server_running(forkserver: Any) -> bool:
    server = getattr(forkserver, "_forkserver", None)
    return getattr(server, "_forkserver_pid", None) is not None


def _make_executor(context: Any) -> concurrent.futures.Executor:
    if context is None:
        return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mixpr")
    return concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context)
