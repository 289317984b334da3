"""Work objects for the ember process group's CPU-tensor ops and point-to-point ops (collectives
on ember tensors return comm.py's EmberWork).

An op on CPU tensors runs to completion before it returns, as Gloo's do, so its Work wraps an
already completed Future holding the output tensors: wait() returns at once, is_completed() is
true, and get_future().value() is the list DDP's reducer and communication hooks expect.

Point-to-point ops must not block at the call: `isend` on both ranks before either `irecv`
would deadlock. Their Work keeps the posted Gloo work and finishes (waits, then copies a received
message into a strided tensor) in wait(), or on a helper thread once get_future() is asked for.
"""
import threading
from datetime import timedelta
from typing import Callable, List, Optional

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from .._untraced import untraced
from .staging import DistributedError


def completed(result: List[torch.Tensor]) -> "dist.Work":
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


@untraced
class PendingWork(dist._Work):
    """A posted Gloo operation plus what to do once it completed (copy a received tensor back)."""

    def __init__(self, op: str, inner: "dist.Work", finish: Callable[[], None],
                 result: List[torch.Tensor], timeout: timedelta):
        super().__init__()
        self._op = op
        self._inner = inner
        self._finish = finish
        self._result = result
        self._timeout = timeout
        self._lock = threading.Lock()
        self._done = False
        self._error: Optional[BaseException] = None
        self._future: Optional[torch.futures.Future] = None

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        with self._lock:
            if not self._done:
                try:
                    t = timeout if timeout else self._timeout
                    self._inner.wait(t)
                    self._finish()
                except Exception as e:  # noqa: BLE001 - re-raised with the op named
                    self._error = DistributedError(f"ember {self._op} failed: {e}")
                self._done = True
                self._inner = self._finish = None
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done

    def is_success(self) -> bool:
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self) -> List[torch.Tensor]:
        self.wait()
        return self._result

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                threading.Thread(target=self._complete_future, daemon=True,
                                 name=f"ember-{self._op}").start()
        return self._future

    def _complete_future(self) -> None:
        try:
            self.wait()
            self._future.set_result(self._result)
        except Exception as e:  # noqa: BLE001 - delivered through the future
            self._future.set_exception(e)
