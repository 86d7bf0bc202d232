"""The batcher: concurrent requests for the same signature merged into one model call."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time

import numpy as np

_STOP = object()  # tells the batcher thread to end


class Batcher:
    """Runs requests on one thread, merging those of the same signature that arrive within ``timeout_s``
    of the first one (up to ``max_batch_size`` rows) into one call."""

    def __init__(self, max_batch_size=64, timeout_s=0.002):
        self.max_batch_size, self.timeout_s = max_batch_size, timeout_s
        self.stats = {"batches": 0, "requests": 0, "rows": 0}
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="zoo-batcher", daemon=True)
        self._thread.start()

    def submit(self, signature, arrays, rows):
        """A future of the outputs of ``signature`` on ``arrays`` (``rows`` rows)."""
        future = concurrent.futures.Future()
        self._queue.put((signature, arrays, rows, future))
        return future

    def close(self):
        """Finish the queued requests, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout=60)

    def _loop(self):
        carry = None
        while True:
            first = self._queue.get() if carry is None else carry
            carry = None
            if first is _STOP:
                return
            batch, rows = [first], first[2]
            deadline = time.monotonic() + self.timeout_s
            while rows < self.max_batch_size:
                remaining = deadline - time.monotonic()
                try:
                    item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP or item[0] is not first[0] or rows + item[2] > self.max_batch_size:
                    carry = item
                    break
                batch.append(item)
                rows += item[2]
            self._run(batch)

    def _run(self, batch):
        signature = batch[0][0]
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["rows"] += sum(rows for _, _, rows, _ in batch)
        batch = [item for item in batch if item[3].set_running_or_notify_cancel()]  # skip timed-out requests
        if not batch:
            return
        try:
            arrays = {k: np.concatenate([a[k] for _, a, _, _ in batch]) for k in batch[0][1]}
            out = signature(arrays)
        except Exception as e:  # noqa: BLE001 (handed to every waiting request)
            for *_, future in batch:
                future.set_exception(e)
            return
        start = 0
        for _, _, rows, future in batch:
            future.set_result({k: v[start:start + rows] for k, v in out.items()})
            start += rows
