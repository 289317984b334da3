"""Ember's profiler: ``profile`` records host and device activity; the exporters and the
summary work on its records.

The records are plain dicts (schema in ``_schema.py``, mirroring C++ ``ember::profiler::Record``),
so the export and summary code is pure Python and works on records from any source.
"""

from ._export import chrome_trace, save_chrome_trace
from ._profile import KeyAverages, profile
from ._schema import KINDS, normalize
from ._summary import KeyAverage, Summary, summary
from ._validate import validate_chrome_trace

__all__ = [
    "KINDS",
    "KeyAverage",
    "KeyAverages",
    "Summary",
    "chrome_trace",
    "normalize",
    "profile",
    "save_chrome_trace",
    "summary",
    "validate_chrome_trace",
]
