"""The scripts under ``bench/`` as modules, for the tests that check what they compute."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` imported once per process under ``name`` (registered in ``sys.modules`` before it runs:
    its dataclasses look their module up there, and the scripts import each other from ``bench/``)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
