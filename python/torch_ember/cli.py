"""The `ember` command: `ember <subcommand> [options]` (`ember <subcommand> --help` for each)."""
from __future__ import annotations

import argparse
import importlib

# subcommand -> (module with main(argv, prog), one-line help). Modules load only when chosen,
# so `ember --help` stays quick.
COMMANDS = {
    "bench": ("torch_ember.bench.cli",
              "benchmarks: train (preparation, execution and completion against PyTorch on the CPU)"),
    "cache": ("torch_ember.compile.cache_cli",
              "inspect or clear the compiled-graph cache (info | clear)"),
    "conformance": ("torch_ember.conformance.run",
                    "run PyTorch's OpInfo database (or module_db, or the op properties) on ember and "
                    "compare with the CPU"),
    "kb": ("torch_ember.kb.cli", "the knowledge base of runs: list, search, compare, report"),
    "ops": ("torch_ember.compile.ops_cli",
            "the op table: each ATen op's eager kernel and compiler route (fused, library, ...)"),
    "sweep": ("torch_ember.sweep.cli",
              "sweep Hugging Face architectures (models) or FlexAttention variants (flex), eager and "
              "compiled, against the CPU"),
    "profile": ("torch_ember.profiler.run",
                "run a script under the ember profiler: trace file and summary"),
    "upstream": ("torch_ember.upstream.run",
                 "run PyTorch's device-generic test files on ember (needs a PyTorch source tree)"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ember", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        # Options belong to the subcommand's own parser (help included), so pass them through.
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return module.main(rest, prog=f"ember {args.command}")


if __name__ == "__main__":
    raise SystemExit(main())
