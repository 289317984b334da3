"""`ember profile script.py [args...]`: run a Python script under the ember profiler, write a
Chrome/Perfetto trace, and print the summary (top kernels, fallback share, device idle gaps and
what the host was doing, copies, peak memory)."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import time


def main(argv=None, prog="ember profile") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.add_argument("-o", "--output", default="ember_trace.json",
                        help="where to write the Chrome trace (default: %(default)s)")
    parser.add_argument("--no-shapes", action="store_true", help="do not record input shapes")
    parser.add_argument("--no-stack", action="store_true", help="do not record source lines")
    parser.add_argument("--top", type=int, default=15, help="rows per summary table")
    opts = parser.parse_args(argv)
    if not os.path.isfile(opts.script):
        parser.error(f"no such script: {opts.script}")

    import torch_ember
    from torch_ember.profiler import profile

    sys.argv = [opts.script, *opts.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
    prof = profile(record_shapes=not opts.no_shapes, with_stack=not opts.no_stack)
    status = 0
    t0 = time.perf_counter()
    print(f"[ember profile] running {opts.script} under the profiler", file=sys.stderr)
    prof.start()
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as e:  # the script's own exit status
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        prof.stop()
    wall = time.perf_counter() - t0
    print(f"[ember profile] {len(prof.records)} records in {wall:.2f} s; writing {opts.output}",
          file=sys.stderr)
    prof.export_chrome_trace(opts.output)
    print(prof.summary().table(top=opts.top))
    print()
    print(prof.key_averages().table(row_limit=opts.top))
    print(f"\ntrace: {opts.output} (open in https://ui.perfetto.dev or chrome://tracing)")
    _ = torch_ember
    return status


if __name__ == "__main__":
    raise SystemExit(main())
