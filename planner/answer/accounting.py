"""FLOP accountings of published training runs, unit conversions between the metrics they are
reported in, and the statistics the fidelity benchmark reports. Pure functions of numbers: no
planner state, no I/O.

Each published figure is in its source's own metric and FLOP count; a prediction is compared in that
same metric, so each accounting is implemented once here, as its source defines it:

- ``megatron_flops(..., recompute=False)``: Megatron-LM's model FLOPs (Narayanan et al., "Efficient
  Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC'21, §5.1 / Appendix;
  generalised to GQA and gated MLPs as in Megatron-core ``num_floating_point_operations``,
  megatron/training/training.py): 12·B·s·L·h²·[(1 + g/a + s/h)·(q/h) + (f/h)·γ + V/(2·L·h)] per step
  of B sequences, i.e. 72·B·s·L·h²·(1 + s/6h + V/12hL) for a GPT block (g = a, q = h, f = 4h, γ = 1).
  NeMo / Megatron-Bridge report "model TFLOP/s/GPU" with it.
- ``megatron_flops(..., recompute=True)``: the same paper's count with full activation recomputation
  (one more forward of every layer, not of the logits): 96·B·s·L·h²·(1 + s/6h + V/16hL) for GPT. The
  Megatron-LM README tables of 2020 and the GPT-3 175B example (138 TFLOP/s, 44 % of peak) use it.
- ``torchtitan_flops_per_token``: torchtitan's MFU numerator (``get_num_flop_per_token``,
  torchtitan/models/utils.py): 6·N + 12·L·H·Q·s with H·Q = heads × head dim and N the parameters
  without the input embedding (all parameters in its 2024-04 performance tables).
- ``six_n_flops``: 6·N·tokens (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# ------------------------------------------------------------------------------------------------
# FLOP accountings


def megatron_flops(
    *,
    sequences: float,
    seq_len: int,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    gated: bool,
    recompute: bool = False,
) -> float:
    """Megatron-LM FLOPs of one step over ``sequences`` sequences of ``seq_len`` tokens (see the
    module docstring). ``recompute`` adds one forward of every transformer layer (×4/3 of the layer
    terms; the logits are not recomputed)."""
    h, s, L = hidden, seq_len, layers
    q = hidden  # heads × head_dim: Megatron's q-projection width equals the hidden size here
    gamma = 1.5 if gated else 1.0
    layer_terms = (1 + kv_heads / heads + s / h) * (q / h) + (ffn / h) * gamma
    if recompute:
        layer_terms *= 4.0 / 3.0
    return 12.0 * sequences * s * L * h * h * (layer_terms + vocab / (2 * L * h))


def decoder_params(
    *, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, gated: bool, tied: bool
) -> tuple[int, int]:
    """(N without the input embedding, input-embedding parameters) of a decoder: attention
    h·(h + 2·h·g/a) + h·h, MLP 3·h·f gated or 2·h·f, two norms of h per layer, a final norm and the
    output projection V·h unless tied (biases ignored: < 0.1 % of any model here)."""
    kv = hidden * kv_heads // heads
    attn = hidden * (hidden + 2 * kv) + hidden * hidden
    mlp = (3 if gated else 2) * hidden * ffn
    per_layer = attn + mlp + 2 * hidden
    body = layers * per_layer + hidden + (0 if tied else vocab * hidden)
    return body, vocab * hidden


def torchtitan_flops_per_token(*, params: float, layers: int, hidden: int, seq_len: int) -> float:
    """torchtitan's FLOPs per token: 6·N + 12·L·(heads·head_dim)·s (see the module docstring). N is
    the parameter count without the input embedding in torchtitan since mid-2024
    (``get_num_params(model, exclude_embedding=True)``); its 2024-04 docs/performance.md counted all
    parameters (its published MFUs reproduce only so): the caller passes the N its source used."""
    return 6.0 * params + 12.0 * layers * hidden * seq_len


def six_n_flops(*, params: float, tokens: float) -> float:
    """6·N·tokens (Kaplan et al. 2020)."""
    return 6.0 * params * tokens


# ------------------------------------------------------------------------------------------------
# Unit conversions (per GPU)


def tflops_per_gpu(flops_per_step: float, step_time_s: float, num_gpus: int) -> float:
    return flops_per_step / step_time_s / num_gpus / 1e12


def step_time_from_tflops(flops_per_step: float, tflops: float, num_gpus: int) -> float:
    return flops_per_step / (tflops * 1e12 * num_gpus)


def tokens_per_s_per_gpu(tokens_per_step: float, step_time_s: float, num_gpus: int) -> float:
    return tokens_per_step / step_time_s / num_gpus


def tokens_to_tflops(tokens_per_s_gpu: float, flops_per_token: float) -> float:
    return tokens_per_s_gpu * flops_per_token / 1e12


def tflops_to_tokens(tflops: float, flops_per_token: float) -> float:
    return tflops * 1e12 / flops_per_token


def mfu(tflops: float, peak_tflops: float) -> float:
    """Fraction of the GPU's dense peak."""
    return tflops / peak_tflops


# ------------------------------------------------------------------------------------------------
# Statistics


def relative_errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    """(predicted − measured) / measured per pair (positive: the model is optimistic for a rate)."""
    if len(predicted) != len(measured):
        raise ValueError("predicted and measured differ in length")
    return [(p - m) / m for p, m in zip(predicted, measured, strict=True)]


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    errs = relative_errors(predicted, measured)
    if not errs:
        return math.nan
    return sum(abs(e) for e in errs) / len(errs)


def max_abs_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    errs = relative_errors(predicted, measured)
    return max((abs(e) for e in errs), default=math.nan)


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties get the mean of the ranks they span (fractional ranking)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        mean = (i + j) / 2 + 1
        for k in range(i, j + 1):
            out[order[k]] = mean
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation with ties: Pearson's correlation of the fractional ranks (as
    scipy.stats.spearmanr). NaN with fewer than 3 pairs or when either side is constant."""
    if len(x) != len(y):
        raise ValueError("x and y differ in length")
    n = len(x)
    if n < 3:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)
