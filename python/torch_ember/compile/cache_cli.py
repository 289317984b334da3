"""`ember cache info` / `ember cache clear`: the compiled-graph cache (EMBER_CACHE_DIR, default
~/.cache/torch_ember)."""
import argparse

from .. import _C
from . import settings


def main(argv=None, prog="ember cache") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["info", "clear"])
    parser.add_argument("--dir", default=None, help="cache directory (default: EMBER_CACHE_DIR)")
    args = parser.parse_args(argv)
    d = args.dir or settings.configured_cache_dir()
    if args.action == "info":
        entries, size = _C._cache_info(d)
        print(f"cache {d}: {entries} entries, {size / 1e6:.2f} MB")
    else:
        entries, _ = _C._cache_info(d)
        _C._cache_clear(d)
        print(f"cache {d}: removed {entries} entries")
    return 0
