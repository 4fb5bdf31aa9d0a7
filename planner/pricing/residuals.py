"""Which built-in residual constants price a request (issue 11 §3-4; the constants: ``planner.specs.calibration``).

``Device.residuals`` is the request's calibration when it has one; else ``builtin_residuals``: the row of
``planner.pricing.residuals_builtin`` (written by ``python bench/fit_residuals.py``, fitted on published runs with
``planner.answer.calibrate``) for the stack's preset and the GPU's generation, else the generation's row pooled over
the stacks with published runs on it (``("*", generation)``, cost model 69: what every measured stack's physics misses
on that GPU generation is the best prior for a stack without published runs of its own — the bundled runtime,
DeepSpeed — and on the out-of-sample llm-foundry MPT (78 runs) and MT-NLG (3) rows it is 13.2 → 5.9 % and
39.4 → 30.3 %, docs/validation.md), else the stack's row pooled over the generations it ran on (``(stack, "*")``),
else identity (``row_key``: a CPU, or a generation with fewer than two stacks' published runs). The generation's row
comes before the stack's since cost model 70: with the Hopper GEMMs priced at a step's clock
(``gemm_table.IN_STEP_SLOWDOWN``, measured on Hopper only) the rows follow the generation, not the stack (cost model
38 found the reverse) — megatron-2020 1.076 and torchtitan 1.098 on Ampere, megatron 1.031 and torchtitan 1.034 on
Hopper — so megatron's Hopper-only pooled row would price its A100 plans 5 % fast.
"""

from __future__ import annotations

from collections.abc import Container
from functools import lru_cache

from planner.specs import Residuals

#: GPU generation by the catalog id's product prefix (H200 is an H100 die with more and faster HBM).
GENERATIONS = {"v100": "volta", "a100": "ampere", "h100": "hopper", "h200": "hopper", "b200": "blackwell"}


#: The residual fields (``Residuals``), in order.
FIELDS: tuple[str, ...] = tuple(Residuals.model_fields)


def generation(gpu_id: str) -> str | None:
    """The GPU generation of a catalog (or catalog-prefixed) GPU id; None for others (e.g. a CPU)."""
    return GENERATIONS.get(gpu_id.lower()[:4])


def stack_preset(stack_id: str) -> str:
    """The preset a stack id is built on (an inline stack's id is ``<base>+{overrides}``)."""
    return stack_id.split("+", 1)[0]


#: A preset with no published run of its own, priced with the rows of the preset whose code it continues: Megatron-LM
#: v2.5 (``megatron-2021``) runs v2.0's transformer kernels, GEMMs and data-parallel engine (planner/specs/stack_eras.py:
#: the same fused softmax / bias-GeLU / bias-dropout-add, unfused attention, local DDP), so what v2.0's runs left
#: to its residual row is left to v2.5's too; what v2.5 adds (interleaving, scatter-gather sends) is priced. Megatron-LM
#: of 2022 (``megatron-2022``, 52e636888c) still runs those kernels and GEMMs (``CoreAttention``: baddbmm, fused
#: scale-mask-softmax, bmm; bias-GeLU, bias-dropout-add) and local DDP: the rows are a compute scale, and its compute
#: kernels are v2.0's; what it adds (SP, selective recompute, the distributed optimizer) is priced. NeMo 24.07
#: (``nemo-2407``) runs the megatron preset's Megatron-core transformer and TE layers (planner/specs/stack_nemo.py):
#: megatron's rows; its apex optimizer's states are priced. torchtitan at the commits of its runs (stack_titan.py) runs
#: the torchtitan preset's kernels and FSDP2 engine, less of its parallelism: torchtitan's rows.
RESIDUAL_LINEAGE = {"megatron-2021": "megatron-2020", "megatron-2022": "megatron-2020", "nemo-2407": "megatron"}
RESIDUAL_LINEAGE |= {f"torchtitan-{era}": "torchtitan" for era in ("2404", "2408", "2412")}


def residual_preset(stack_id: str) -> str:
    """The preset whose built-in residual rows price ``stack_id``: its own, or its lineage's (``RESIDUAL_LINEAGE``)."""
    preset = stack_preset(stack_id)
    return RESIDUAL_LINEAGE.get(preset, preset)


def row_key(rows: Container[tuple[str, str]], stack: str, gen: str | None) -> tuple[str, str] | None:
    """The row of a residual table that prices ``stack`` (a preset id) on generation ``gen``: its own
    (stack, generation) row, else the generation's row pooled over the stacks with published runs on it (``("*",
    generation)``: a stack without published runs there — the bundled runtime, DeepSpeed, megatron on A100 — is
    expected to miss what the measured stacks miss on that GPU), else the stack's row pooled over generations
    (``(stack, "*")``), else None (identity). ``bench/fit_residuals.py`` cross-validates this rule."""
    if gen is None:
        return None
    return next((k for k in ((stack, gen), ("*", gen), (stack, "*")) if k in rows), None)


@lru_cache(maxsize=256)
def builtin_residuals(stack_id: str, gpu_id: str) -> Residuals:
    """The built-in residuals for a stack on a GPU: ``planner.pricing.residuals_builtin.ROWS`` at ``row_key``."""
    from planner.pricing.residuals_builtin import ROWS

    key = row_key(ROWS, residual_preset(stack_id), generation(gpu_id))
    return Residuals(**ROWS[key]) if key is not None else Residuals()
