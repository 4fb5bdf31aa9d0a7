"""The accumulation mode of FP8 GEMMs on Hopper (cost model 56): the forward (output) GEMM runs with "fast"
accumulation, the two backward GEMMs (input gradient, weight gradient) with the split accumulator, which is slower.

Hopper's FP8 tensor cores accumulate in reduced precision; cuBLASLt's ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` off (the
default) periodically promotes the partial sums to FP32 registers ("When enabled, problem execution might be faster
but at the cost of lower accuracy because intermediate results will not periodically be promoted to a higher
precision": cuBLAS docs, ``cublasLtMatmulDescAttributes_t``; DeepSeek-V3 arXiv 2412.19437 §3.3.2 describes the same
promotion, every 128 elements of K, on CUDA cores). Every FP8 stack the planner prices keeps fast accumulation for
the forward GEMM only:

* torchao (torchtitan's float8 converter): ``Float8GemmConfig.use_fast_accum`` defaults to False and only
  ``gemm_config_output`` sets it True (``torchao/float8/config.py:110, 174`` at 6243040, the torchtitan 2025-06
  async-TP benchmark's torchao; the same at v0.10.0), for tensorwise and rowwise alike; rowwise's slow-accum
  backward GEMMs run cuBLAS's tensorwise kernel (``RecipeFacts.rescale_bytes``);
* Transformer Engine: ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = True``, ``_2X_ACC_WGRAD = True``
  (``transformer_engine/pytorch/module/base.py:41-43`` at v1.8, ``:56-58`` at v2.9), and
  ``Float8CurrentScaling``'s ``fp8_gemm_fprop/dgrad/wgrad`` split accumulator False/True/True
  (``common/recipe/__init__.py:240-242`` at v2.9): delayed and current scaling under NeMo, Megatron and MLPerf.

The cost: a measured 1.1× to 1.2× speedup from turning fast accumulation on (pytorch/ao issue 2377, 2025-06-14, on
H100 at torchao 6243040; triton-lang/triton issue 2513 measured the same direction on H100: "fp8_fast_accum = True
has a significant positive impact"): the split-accumulator GEMM takes ``SPLIT_ACCUM_SLOWDOWN`` = 1.15 (the middle
of that range) × the fast one's compute time. Blackwell (sm_100) has no fast-accumulation mode ("there is no
fastAccuMode for sm100", NVIDIA/TransformerEngine PR 2748): the slowdown applies to the sm_90 parts only, those
priced by the measured sm_90 table (``gpu.MEASURED_TABLE_GPUS``).
"""

from __future__ import annotations

#: Compute time of a split-accumulator FP8 GEMM ÷ that of the same GEMM with fast accumulation (sm_90): the middle
#: of pytorch/ao issue 2377's measured 1.1×–1.2×.
SPLIT_ACCUM_SLOWDOWN = 1.15

#: The GEMM directions of a linear that run with the split accumulator (``gpu.gemm_time``'s ``backward``).
SPLIT_ACCUM_PHASES = ("dgrad", "wgrad")


def split_accum_slowdown(sm90: bool, backward: bool) -> float:
    """The factor on an FP8 GEMM's compute time for its accumulation mode: ``SPLIT_ACCUM_SLOWDOWN`` for a backward
    GEMM on sm_90, 1 otherwise."""
    return SPLIT_ACCUM_SLOWDOWN if sm90 and backward else 1.0
