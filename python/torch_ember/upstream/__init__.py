"""`ember upstream`: PyTorch's own device-generic test files (test_ops.py, test_view_ops.py, ...)
run on ember from a PyTorch source tree, with crashes and hangs attributed to single tests and a
CPU control run for every failure. `torch_ember.upstream.run` says how; `run.run(...)` runs it
from Python; `torch_ember.upstream.plugin` is the pytest plugin the child processes load."""
