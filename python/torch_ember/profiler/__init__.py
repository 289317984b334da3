"""Ember's profiler: trace export and summaries over tracer records.

The records are plain dicts (schema in ``_schema.py``, mirroring C++ ``ember::profiler::Record``),
so everything here is pure Python and works on records from any source.
"""

from ._export import chrome_trace, save_chrome_trace
from ._schema import KINDS, normalize
from ._summary import KeyAverage, Summary, summary
from ._validate import validate_chrome_trace

__all__ = [
    "KINDS",
    "KeyAverage",
    "Summary",
    "chrome_trace",
    "normalize",
    "save_chrome_trace",
    "summary",
    "validate_chrome_trace",
]
