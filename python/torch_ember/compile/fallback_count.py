"""Counts of the ops that compiled graphs left to eager kernels (fallback="eager"), keyed by op
name, so that a fallback report can show compiled-mode fallbacks beside eager CPU fallbacks."""
import collections
import threading

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()


def note(eager_nodes) -> None:
    with _lock:
        for op, _src in eager_nodes:
            _counts[op] += 1


def counts() -> dict:
    with _lock:
        return dict(_counts)


def reset() -> None:
    with _lock:
        _counts.clear()
