"""Drain the devices before the interpreter shuts down.

Work still queued at exit finishes on Ember's stream workers while PyTorch's autograd device
thread releases its last backward's graph; both may drop the last reference to a Python object,
which needs the GIL. Once finalization has begun, a thread asking for the GIL is terminated, and
the process aborts. Waiting here, while the interpreter is still whole and with the GIL released
(the binding releases it), lets all of that finish first.
"""
import atexit
import sys

from . import _C


def _drain() -> None:
    for index in range(_C._device_count()):
        try:
            _C._synchronize(index)
        except Exception as err:  # a kernel failed after the program's last synchronizing call
            print(f"ember: error in work still queued at exit: {err}", file=sys.stderr)
    # Autograd's ember device threads may still hold the last backward's graph, whose release
    # takes the GIL: let them finish that now (see drain_autograd_threads in bindings/module.cc).
    try:
        _C._drain_autograd_threads()
    except Exception as err:
        print(f"ember: error while draining autograd threads at exit: {err}", file=sys.stderr)


atexit.register(_drain)
