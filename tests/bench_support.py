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


def on_megatron(body: dict) -> dict:
    """A NeMo 24.07 request (``training.stack`` based on ``nemo-2407``) on the ``megatron`` preset, its overrides kept
    but apex's optimizer dtype: Megatron-core 0.16.1 runs any stage cut (``--pipeline-model-parallel-layout``), NeMo
    24.07's the even split only (``Stack.even_stages``), so this is the same request with the uneven interleaved cuts
    the search must solve (the tests of that search used the NeMo rows before NeMo 24.07 split evenly only)."""
    training = body["training"]
    stack = training["stack"]
    assert isinstance(stack, dict) and stack["base"] == "nemo-2407", stack
    return {**body, "training": {**training, "stack": {**stack, "base": "megatron", "optimizer_dtype": None}}}


def nemo_any_cut(monkeypatch) -> None:  # noqa: ANN001 (pytest.MonkeyPatch; pytest is not imported here)
    """The ``nemo-2407`` preset as it was before it split evenly only (``Stack.even_stages`` off), for the tests of the
    uneven interleaved search that need a NeMo row's own prices (apex's optimizer dtypes, which the ``megatron`` preset
    of ``on_megatron`` does not run): the same requests, answers and proofs as before that change."""
    from planner.specs.stacks import STACKS

    monkeypatch.setitem(STACKS, "nemo-2407", STACKS["nemo-2407"].model_copy(update={"even_stages": False}))
