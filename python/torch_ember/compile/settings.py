"""Environment settings of compiled mode, read at each compile (not at import) so that a
process or a test can change them between compiles."""
import os
from pathlib import Path


def cache_dir() -> str:
    """EMBER_CACHE_DIR, default ~/.cache/torch_ember; "" when EMBER_CACHE=0 disables the cache."""
    if os.environ.get("EMBER_CACHE", "1") == "0":
        return ""
    return configured_cache_dir()


def configured_cache_dir() -> str:
    """The cache directory regardless of EMBER_CACHE (what `ember cache` inspects)."""
    d = os.environ.get("EMBER_CACHE_DIR")
    return d if d else str(Path.home() / ".cache" / "torch_ember")


def log_compiles() -> bool:
    """EMBER_LOG is a comma-separated list of topics; "compile" prints one line per compile."""
    return "compile" in os.environ.get("EMBER_LOG", "").split(",")


def background_compile() -> bool:
    """EMBER_BACKGROUND_COMPILE=1 makes options={"background": True} the default."""
    return os.environ.get("EMBER_BACKGROUND_COMPILE", "0") == "1"
