"""Collectives in stream order, with the semantics of NCCL's process groups.

A collective on ember tensors does not block the host. At the call, on the calling thread:
- an event marks the current stream's queue: the work that produces the inputs;
- the group's communication stream on that device waits for that event, then gets a task that
  holds the stream until the host finishes the collective (a HostSignal, runtime/host_signal.h),
  named after the op, so a profiler trace shows the communication as a span on its own stream;
- the job goes to the group's communication thread, and the call returns a Work at once.
The communication thread runs jobs in call order, which is the same order on every rank: it
waits for the input event on the host, runs the op on Gloo over host views of the tensors
(staging.py), then sets the signal, which releases the communication stream, and completes the
Work's future.

Work.wait() makes the *current* stream wait for the communication stream (an event recorded
after the signal task): the host goes on, and later kernels on that stream see the results.
Kernels queued between the call and wait() overlap the communication: that is how DDP's bucket
all-reduces overlap the rest of the backward pass. get_future() is a device-aware future, as
NCCL's is: completed at the call with events recorded on the communication stream, so its
wait() and value() order the current stream instead of blocking the host, and a callback
(DDP's hooks; PowerSGD's waits on further collectives inside its callbacks) runs at once on a
stream that waits for the collective.

Failures are asynchronous, as with NCCL: a transport error (a dead peer, a timeout) is set on the
signal with the op and rank named, so it is stored on the communication stream and reaches every
stream that waits for the collective, raised at their next synchronizing call; wait() raises it
directly once the job has failed. The signal task gives up after twice the group's timeout, so a
lost job cannot hold a stream forever, and at interpreter exit pending signals are released.

The tensors stay referenced by the job until the transport is done with them, so their memory
cannot be reused under it. A job never queues work on an ember stream: the user's stream may be
waiting for this very collective, and the job would wait behind it.
"""
import atexit
import queue
import threading
import weakref
from datetime import timedelta
from typing import Callable, List, Optional

import torch
import torch.distributed as dist

from .. import _C
from .staging import DistributedError

_ENGINES: "weakref.WeakSet[CommEngine]" = weakref.WeakSet()


class EmberWork(dist._Work):
    """One collective in flight: wait() orders the current stream after it; get_future()
    completes when the transport finished."""

    def __init__(self, op: str, device: torch.device, done: torch.Event, result: List[torch.Tensor],
                 stream: torch.Stream):
        super().__init__()
        self.op = op
        self._device = device
        self._done = done
        self._result = result
        self._finished = threading.Event()
        self._error: Optional[BaseException] = None
        self._future = torch.futures.Future(devices=[device])
        with torch.ember.stream(stream):  # its events mark the end of the collective
            self._future.set_result(result)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        if self._error is not None:
            raise self._error
        self._done.wait(torch.accelerator.current_stream(self._device.index))
        return True

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        return self._finished.is_set()

    def is_success(self) -> bool:
        return self._finished.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self) -> List[torch.Tensor]:
        self.wait()
        return self._result

    def get_future(self) -> torch.futures.Future:
        return self._future

    def _done_on_host(self, error: Optional[BaseException]) -> None:
        """The transport finished: set before the stream is released, so a result that is
        visible is also is_completed()."""
        self._error = error
        self._finished.set()


class CommEngine:
    """A process group's communication thread, and its communication stream on each device.

    Every Gloo collective of the group goes through the one thread, in call order: Gloo numbers
    a group's collectives as they are issued, so ops issued from two threads could pair a rank's
    all_reduce with its peer's barrier. Ops on CPU tensors and barriers wait here for their turn
    (call); ops on ember tensors return at once (launch)."""

    def __init__(self, describe: str):
        self.describe = describe  # "rank R of N", for error messages
        self._streams = {}  # device index -> the communication stream
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self._pending: "set" = set()
        self._lock = threading.Lock()
        self.last = {}  # device index -> the newest EmberWork
        self._thread = threading.Thread(target=self._loop, daemon=True, name="ember-comm")
        self._thread.start()
        _ENGINES.add(self)

    def _stream(self, device: torch.device) -> torch.Stream:
        stream = self._streams.get(device.index)
        if stream is None:
            stream = self._streams[device.index] = torch.Stream(device=device)
        return stream

    def launch(self, op: str, device: torch.device, result: List[torch.Tensor], keep: list,
               job: Callable[[], None], timeout: timedelta) -> EmberWork:
        index = device.index
        if _C._is_capturing(index):
            raise DistributedError(
                f"ember {op}: a collective cannot be captured in an ember graph (the host "
                f"carries it; a replay could not run it)")
        stream = self._stream(device)
        ready = torch.Event(device=device)
        ready.record(torch.accelerator.current_stream(index))
        ready.wait(stream)
        signal = _C._HostSignal()
        limit = 2 * max(timeout.total_seconds(), 1.0)
        signal.enqueue_wait(index, stream.stream_id, f"ember {op}", limit)
        done = torch.Event(device=device)
        done.record(stream)
        work = EmberWork(op, device, done, result, stream)
        with self._lock:
            self._pending.add(signal)
        self.last[index] = work
        self._jobs.put((ready, job, signal, work, keep))
        return work

    def call(self, op: str, job: Callable[[], None]) -> None:
        """Run `job` in its turn and wait for it; its error raised here."""
        if threading.current_thread() is self._thread:
            job()
            return
        box = _Box(op)
        self._jobs.put((None, job, None, box, None))
        box.done.wait()
        if box.error is not None:
            raise box.error

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            ready, job, signal, work, keep = item
            error = None
            try:
                if ready is not None:
                    try:
                        ready.synchronize()
                    except Exception as e:  # noqa: BLE001 - a kernel before the call failed
                        raise DistributedError(
                            f"ember {work.op} on {self.describe}: the work that produces its "
                            f"inputs failed: {e}") from e
                job()
            except DistributedError as e:
                error = e
            except BaseException as e:  # noqa: BLE001 - reported through the Work and the stream
                error = DistributedError(f"ember {work.op} failed on {self.describe}: {e}")
            # Drop the job (whose closure holds the process group) before anyone can see it
            # done: the last reference to a group must not be released on this daemon thread,
            # which interpreter shutdown may stop while the release waits for the GIL.
            item = job = keep = None
            work._done_on_host(error)
            if signal is not None:
                signal.set(str(error) if error is not None else "")
                with self._lock:
                    self._pending.discard(signal)
            ready = signal = work = None

    def close(self, reason: str) -> None:
        """Release every stream task still waiting (their jobs will not run) and stop."""
        with self._lock:
            pending, self._pending = list(self._pending), set()
        for signal in pending:
            signal.set(f"ember collective on {self.describe}: {reason}")
        self._jobs.put(None)

    def drain(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the jobs already queued to finish."""
        for work in list(self.last.values()):
            work._finished.wait(timeout)


class _Box:
    """A host-synchronous job's completion, for call()."""

    def __init__(self, op: str):
        self.op = op
        self.error: Optional[BaseException] = None
        self.done = threading.Event()

    def _done_on_host(self, error: Optional[BaseException]) -> None:
        self.error = error
        self.done.set()


@atexit.register
def _release_at_exit() -> None:
    for engine in list(_ENGINES):
        engine.close("the process is exiting")
