"""What every sweep does with its results: messages without this machine's paths, DIR/<stem>.json
and DIR/<stem>.md written atomically after each item (so an interrupted run can resume), and the
finished run stored in the knowledge base."""
from __future__ import annotations

import json
import os
import re
import sys

# "/home/me/proj/.venv/lib/python3.11/site-packages/transformers/x.py" -> "transformers/x.py":
# failure messages are kept in reports and docs, which must not name one machine's directories.
_SITE = re.compile(r"[^\s'\"(]*/(?:site|dist)-packages/")


def portable(text: str) -> str:
    return _SITE.sub("", text)


def write(out: str, stem: str, data: dict, to_markdown) -> None:
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, f"{stem}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, os.path.join(out, f"{stem}.json"))
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(to_markdown(data))


def record(kind: str, data: dict) -> None:
    """Stores the run as data["kb_run"] (None when EMBER_KB=off). The knowledge base is a
    by-product: failing to record never breaks the run."""
    try:
        from ..kb import record_run
        data["kb_run"] = record_run(kind, data)
    except Exception as e:  # noqa: BLE001
        print(f"warning: ember kb: run not recorded: {e!r}", file=sys.stderr)
