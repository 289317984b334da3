"""`ember bench <benchmark>`: `ember bench train` (training: preparation, execution and
completion of Ember eager and compiled against PyTorch on the CPU)."""
from __future__ import annotations

import sys

BENCHES = {"train": "torch_ember.bench.train"}


def main(argv=None, prog="ember bench") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHES:
        print(f"usage: {prog} {{{','.join(BENCHES)}}} [options]   ({prog} train --help)\n\n{__doc__}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    import importlib

    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:], prog=f"{prog} {argv[0]}")
