"""What every consumer check shares. Each check runs in the virtual environment that holds its
target's own packages (``make consumers``), not in meshplan's: ``python tests/consumers/<check>.py
ITEMS.json OUT.json``. ITEMS is a list of ``{"id": ..., ...}`` (the exported files and what the check
needs to read them); OUT gets ``{"versions": {package: version}, "results": [{"id", "ok", "facts" |
"error"}]}``. A check accepts an item by returning facts read back from the target's own objects; the
target rejecting it (an exception, or tyro's exit after printing the error) is ``ok: false`` with the
target's own message. tests/test_consumers.py compares the facts with the plan.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import traceback
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

_BOX = re.compile(r"[│╭╮╰╯─━┃]+")


def clean(text: str) -> str:
    """A message printed in a rich box (tyro) as one plain line, from its error on."""
    text = " ".join(_BOX.sub(" ", text).split())
    start = text.find("Error parsing")
    return text[start:] if start >= 0 else text


def run(check: Callable[[dict[str, Any]], dict[str, Any]], packages: list[str]) -> None:
    items_path, out_path = sys.argv[1], sys.argv[2]
    with open(items_path) as f:
        items = json.load(f)
    results = []
    for item in items:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stderr(printed):
                facts = check(item)
            results.append({"id": item["id"], "ok": True, "facts": facts})
        except SystemExit as exc:  # tyro prints why it rejects a config, then exits
            results.append({"id": item["id"], "ok": False, "error": clean(printed.getvalue()) or f"exit {exc.code}"})
        except Exception as exc:  # the target's own validation refused the export
            where = traceback.extract_tb(exc.__traceback__)[-1]
            results.append(
                {
                    "id": item["id"],
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno})",
                }
            )
    with open(out_path, "w") as f:
        json.dump({"versions": {p: version(p) for p in packages}, "results": results}, f, default=str)
