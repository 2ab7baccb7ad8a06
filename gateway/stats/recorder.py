"""Stats written off the request path: a request only puts its record on a bounded queue; one
thread folds what has queued into a batch and writes it, so a slow disk or Redis never holds the
event loop, and under a flood records are dropped (counted, logged once), never queued without end."""

from __future__ import annotations

import logging
import queue
import threading
import time

from gateway.stats.batch import Batch
from gateway.stats.record import Record
from gateway.stats.store import Store

log = logging.getLogger("gateway.stats")

QUEUE_SIZE = 100_000
BATCH_SIZE = 2_000
STOP = object()


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.queue: queue.Queue[object] = queue.Queue(QUEUE_SIZE)
        self.dropped = 0
        self.failed = 0  # batches the store refused (logged); their figures are lost, the gateway goes on
        self._queued = 0  # records accepted; ``_written`` of them are in the store (or lost with a failure)
        self._written = 0
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="mixpr-stats", daemon=True)
        self._thread.start()

    def add(self, record: Record) -> None:
        """Never blocks: the request path calls this."""
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("stats queue full (the store is slow or down): records are being dropped")
            return
        self._queued += 1  # only the event loop's thread adds

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (in a thread, never on the loop) until what was queued before the call is written:
        a read of the page then sees every request answered before it."""
        target = self._queued
        with self._done:
            return self._done.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float = 10.0) -> None:
        self.queue.put(STOP)
        self._thread.join(timeout)
        self.store.close()

    def _run(self) -> None:
        while True:
            batch, taken, stop = self._take()
            if batch:
                self._write(batch)
            with self._done:
                self._written += taken
                self._done.notify_all()
            if stop:
                return

    def _take(self) -> tuple[Batch, int, bool]:
        """What queued since the last write, up to BATCH_SIZE; waits for the first."""
        batch, taken = Batch(), 0
        item = self.queue.get()
        while item is not STOP:
            assert isinstance(item, Record)
            batch.add(item)
            taken += 1
            if taken >= BATCH_SIZE:
                break
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
        return batch, taken, item is STOP

    def _write(self, batch: Batch) -> None:
        started = time.perf_counter()
        try:
            self.store.write(batch)
        except Exception as exc:  # a full disk or a lost Redis: the page misses these, requests go on
            self.failed += 1
            log.warning("stats write failed (%s: %s); %d records lost", type(exc).__name__, exc,
                        len(batch.rows))
        log.debug("stats batch written in %.1f ms", (time.perf_counter() - started) * 1000)
