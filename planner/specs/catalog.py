"""Catalogs of GPUs (vendor datasheets, dense rates) and models (their papers' shapes).

Bandwidths are per GPU and one direction: NVLink's datasheet figure is the bidirectional total over
all links, so it is halved; the NIC rate is one InfiniBand/RoCE port per GPU as in the vendor's
reference systems (DGX/HGX), in GB/s (Gb/s ÷ 8).
Memory is the capacity the driver reports (MiB ÷ 1024), not the marketing number.
"""

from __future__ import annotations

from pydantic import Field

from planner.specs import GpuSpec, ModelSpec, PeakTflops, Spec
from planner.specs.catalog_moe import MOE_MODELS
from planner.specs.errors import UnknownCatalogIdError
from planner.specs.model import llama_like

_A100_SRC = (
    "NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense; "
    "NVLink 3 600 GB/s bidirectional; DGX A100: one 200 Gb/s HDR port per GPU"
)
_H100_SRC = (
    "NVIDIA H100 Tensor Core GPU datasheet, SXM5: FP32 67, TF32 494.5, BF16/FP16 989.4, FP8 1978.9 "
    "TFLOPS dense (half the with-sparsity figures); HBM3 3.35 TB/s; NVLink 4 900 GB/s bidirectional; "
    "DGX H100: one 400 Gb/s NDR port per GPU"
)

GPUS: dict[str, GpuSpec] = {
    g.id: g
    for g in [
        GpuSpec(
            id="a100-sxm4-40gb",
            memory_gib=40.0,
            peak_tflops=PeakTflops(fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0),
            hbm_bandwidth_GBps=1555.0,
            nvlink_bandwidth_GBps=300.0,
            nic_bandwidth_GBps=25.0,
            source=_A100_SRC + "; HBM2 1,555 GB/s",
        ),
        GpuSpec(
            id="a100-sxm4-80gb",
            memory_gib=80.0,
            peak_tflops=PeakTflops(fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0),
            hbm_bandwidth_GBps=2039.0,
            nvlink_bandwidth_GBps=300.0,
            nic_bandwidth_GBps=25.0,
            source=_A100_SRC + "; HBM2e 2,039 GB/s",
        ),
        GpuSpec(
            id="h100-sxm5-80gb",
            memory_gib=79.6,
            peak_tflops=PeakTflops(fp32=67.0, tf32=494.5, bf16=989.4, fp16=989.4, fp8=1978.9),
            hbm_bandwidth_GBps=3350.0,
            nvlink_bandwidth_GBps=450.0,
            nic_bandwidth_GBps=50.0,
            source=_H100_SRC,
        ),
        GpuSpec(
            # Meta's Grand Teton H100 (torchtitan's H100 benchmarks): the SXM5 GH100 (132 SMs) with 96 GB
            # HBM2e at 2.4 TB/s run at a 500 W power limit. Its tensor rates are MEASURED at that limit: Meta's
            # FBGEMM on "H100 500W" (pytorch/FBGEMM PR #2546, 2024-04) ran BF16 GEMMs at 585.2 TFLOPS (8192³),
            # 575.1 (65536×8192×7168) and 546.3 (65536×3584×8192), and its FP8 row-wise GEMM alone at 1,125.5
            # (8192³). The rates below are those best-shape figures ÷ the H100 family's large-GEMM ceilings
            # (``pricing.device.GEMM_EFFICIENCY`` 0.80, ``pricing.gpu.FP8_GEMM_EFFICIENCY`` 0.709), so the model's
            # large GEMMs run at the measured rate: BF16 731.5, FP8 1,587.4; TF32 half of BF16; FP32 the SXM5's
            # 67 × the same power-limited clock ratio (731.5 / 989.4). The datasheets' interpolation in board
            # power it replaces (BF16 886.8) had the GEMMs 21 % faster than measured.
            id="h100-sxm-96gb-hbm2e",
            memory_gib=95.0,
            peak_tflops=PeakTflops(fp32=49.5, tf32=365.8, bf16=731.5, fp16=731.5, fp8=1587.4),
            hbm_bandwidth_GBps=2400.0,
            nvlink_bandwidth_GBps=450.0,
            nic_bandwidth_GBps=50.0,
            source="torchtitan benchmarks/llama3_h100_202412_torchtitan.md ('96GB HBM2e with 2.4 TB/sec', "
            "'400 Gb/s per GPU', 'default 500W power limit'); docs/performance.md (2024-08: 'H100(95GB)'): "
            "capacity 95 GiB; tensor rates from GEMMs measured at 500 W (pytorch/FBGEMM PR #2546: BF16 585.2, "
            "FP8 row-wise 1,125.5 TFLOPS at 8192^3) / the H100 large-GEMM ceilings (0.80, 0.709); NVLink 4 as SXM5",
        ),
        GpuSpec(
            id="h200-sxm-141gb",
            memory_gib=140.4,
            peak_tflops=PeakTflops(fp32=67.0, tf32=494.5, bf16=989.4, fp16=989.4, fp8=1978.9),
            hbm_bandwidth_GBps=4800.0,
            nvlink_bandwidth_GBps=450.0,
            nic_bandwidth_GBps=50.0,
            source="NVIDIA H200 datasheet, SXM: H100 compute rates; 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s bidirectional; 400 Gb/s NIC per GPU",
        ),
        GpuSpec(
            # DGX-2's V100 (SXM3, 300 W): no BF16 and no TF32; 16 per node on NVSwitch.
            id="v100-sxm3-32gb",
            memory_gib=31.75,
            peak_tflops=PeakTflops(fp32=15.7, fp16=125.0),
            hbm_bandwidth_GBps=900.0,
            nvlink_bandwidth_GBps=150.0,
            nic_bandwidth_GBps=6.25,
            source="NVIDIA Tesla V100 datasheet (volta-v100-datasheet-update-us-1165301-r5): FP32 15.7, Tensor "
            "(FP16) 125 TFLOPS; 32 GB HBM2 at 900 GB/s (32,510 MiB reported); NVLink 300 GB/s = 6 NVLink2 links × "
            "25 GB/s per direction. NVIDIA DGX-2 datasheet: 16 V100 32GB on 12 NVSwitches (every GPU at its full "
            "150 GB/s per direction), 8 × 100 Gb/s InfiniBand EDR per node = 6.25 GB/s per GPU",
        ),
        GpuSpec(
            id="b200-sxm-192gb",
            memory_gib=179.1,
            peak_tflops=PeakTflops(fp32=75.0, tf32=1100.0, bf16=2250.0, fp16=2250.0, fp8=4500.0),
            hbm_bandwidth_GBps=8000.0,
            nvlink_bandwidth_GBps=900.0,
            nic_bandwidth_GBps=50.0,
            source="NVIDIA HGX B200 datasheet ÷ 8 GPUs, dense: FP32 75, TF32 1,100, BF16/FP16 2,250, FP8 4,500 TFLOPS; HBM3e 8 TB/s; NVLink 5 1.8 TB/s bidirectional; 400 Gb/s ConnectX-7 per GPU",
        ),
    ]
}


#: Streaming multiprocessors per GPU (what a GEMM's output tiles are scheduled over, in waves;
#: ``planner.pricing.layer_times``). A100: 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020);
#: H100 SXM5: 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022: "132 SMs" for SXM5);
#: H200: the same GH100 configuration as H100 SXM5 (132); V100: 80 SMs (NVIDIA Tesla V100 GPU Architecture
#: whitepaper, 2017: "Tesla V100 ... 80 SMs"); B200: 2 dies × 74 enabled SMs = 148
#: (Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling", 2025).
SM_COUNT: dict[str, int] = {
    "v100-sxm3-32gb": 80,
    "a100-sxm4-40gb": 108,
    "a100-sxm4-80gb": 108,
    "h100-sxm5-80gb": 132,
    "h100-sxm-96gb-hbm2e": 132,
    "h200-sxm-141gb": 132,
    "b200-sxm-192gb": 148,
}


def sm_count(gpu_id: str) -> int | None:
    """SMs of a catalog GPU, or of a user GPU whose id starts with a catalog family (``a100``, ``h100``,
    ``h200``, ``b200``); None when unknown (no wave quantization is charged then)."""
    if gpu_id in SM_COUNT:
        return SM_COUNT[gpu_id]
    family = gpu_id.lower()[:4]
    return next((n for k, n in SM_COUNT.items() if k.startswith(family)), None)


def _gpt3(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    # GPT-3 (Brown et al. 2020, Table 2.1): FFN 4·d, vocab 50257 (GPT-2 BPE), context 2048, tied
    # input/output embeddings, learned positions, LayerNorm, GELU.
    return ModelSpec(
        name=name,
        family="gpt",
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=4 * hidden,
        vocab_size=50257,
        activation="gelu",
        norm="layernorm",
        tie_embeddings=True,
        max_seq_len=2048,
    )


def _llama(
    name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int, qkv_bias: bool = False
) -> ModelSpec:
    return llama_like(name, layers, hidden, heads, kv, ffn, vocab, seq, qkv_bias=qkv_bias)


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _gpt3("gpt3-125m", 12, 768, 12),
        _gpt3("gpt3-350m", 24, 1024, 16),
        _gpt3("gpt3-760m", 24, 1536, 16),
        # The paper lists 24 heads of 128 for d=2048, which does not divide; 16 heads of 128 keeps
        # the paper's head size (as Megatron's GPT-3 1.3B configs do).
        _gpt3("gpt3-1.3b", 24, 2048, 16),
        _gpt3("gpt3-2.7b", 32, 2560, 32),
        _gpt3("gpt3-6.7b", 32, 4096, 32),
        # The paper prints d=5140 (a typo): 40 heads × 128 = 5120.
        _gpt3("gpt3-13b", 40, 5120, 40),
        _gpt3("gpt3-175b", 96, 12288, 96),
        # Llama 2 (Touvron et al. 2023) and the released configs.
        _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        # Llama 3 / 3.1 (Dubey et al. 2024, Table 3). Llama 3 (April 2024) was trained to an 8K context
        # (meta-llama/Meta-Llama-3-8B config.json: max_position_embeddings 8192); Llama 3.1 (July 2024)
        # extends the same shapes to 128K (meta-llama/Llama-3.1-8B config.json: 131072). 405B exists
        # only as 3.1: "llama3-405b" is that release (kept under its old id).
        _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        _llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
        _llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
        _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 131072),
        # Qwen2.5 (Qwen team 2024): Llama-shaped (RMSNorm, SwiGLU, RoPE, GQA) with biases on the Q/K/V
        # projections only. From https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json and
        # https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json: hidden_size, num_hidden_layers,
        # num_attention_heads, num_key_value_heads, intermediate_size, vocab_size 152064,
        # max_position_embeddings 131072, tie_word_embeddings false.
        _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 131072, qkv_bias=True),
        _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 131072, qkv_bias=True),
        # Tiny models for tests and CPU runs: 8 layers so pipelines of up to 8 stages fit.
        ModelSpec(
            name="tiny-gpt",
            family="gpt",
            num_layers=8,
            hidden_size=64,
            num_attention_heads=4,
            num_kv_heads=4,
            ffn_hidden_size=256,
            vocab_size=256,
            activation="gelu",
            norm="layernorm",
            tie_embeddings=False,
            max_seq_len=128,
        ),
        ModelSpec(
            name="tiny-llama",
            family="llama",
            num_layers=8,
            hidden_size=64,
            num_attention_heads=8,
            num_kv_heads=4,
            ffn_hidden_size=192,
            vocab_size=256,
            activation="swiglu",
            norm="rmsnorm",
            tie_embeddings=False,
            max_seq_len=128,
        ),
        # Mixtures of experts (planner.specs.catalog_moe).
        *MOE_MODELS,
    ]
}


# ------------------------------------------------------------------------------------------------
# Cluster presets: known systems, their links as the vendor states them


class ClusterPreset(Spec):
    """A known system: its GPU, GPUs per node and links as its datasheet states them (converted to GB/s
    per GPU by ``planner.specs.bandwidth_per_gpu_GBps`` when a cluster names it)."""

    id: str
    description: str
    gpu: str
    gpus_per_node: int = Field(ge=1)
    intra_node_bandwidth: str
    inter_node_bandwidth: str
    intra_node_bandwidth_GBps: float = Field(description="intra_node_bandwidth as GB/s per GPU (derived).")
    inter_node_bandwidth_GBps: float = Field(description="inter_node_bandwidth as GB/s per GPU (derived).")
    source: str

    def fills(self) -> dict:
        """The ClusterSpec fields this preset supplies (where the cluster does not give them)."""
        return {
            "gpu": self.gpu,
            "gpus_per_node": self.gpus_per_node,
            "intra_node_bandwidth": self.intra_node_bandwidth,
            "inter_node_bandwidth": self.inter_node_bandwidth,
        }


def _preset(
    id: str, description: str, gpu: str, intra: str, inter: str, source: str, gpus_per_node: int = 8
) -> ClusterPreset:
    from planner.specs import bandwidth_per_gpu_GBps

    return ClusterPreset(
        id=id,
        description=description,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        intra_node_bandwidth=intra,
        inter_node_bandwidth=inter,
        intra_node_bandwidth_GBps=bandwidth_per_gpu_GBps(intra, gpus_per_node),
        inter_node_bandwidth_GBps=bandwidth_per_gpu_GBps(inter, gpus_per_node),
        source=source,
    )


CLUSTER_PRESETS: dict[str, ClusterPreset] = {
    p.id: p
    for p in [
        _preset(
            "dgx-a100",
            "NVIDIA DGX A100 (80 GB): 8 A100 SXM4, NVLink 3, 8 × 200 Gb/s HDR InfiniBand compute NICs",
            "a100-sxm4-80gb",
            "300 GB/s per GPU",
            "8x200Gb/s",
            "NVIDIA DGX A100 datasheet: 8× single-port ConnectX-6 VPI 200 Gb/s HDR InfiniBand; NVLink 600 GB/s "
            "bidirectional per GPU, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-dgx-a100-datasheet.pdf",
        ),
        _preset(
            "dgx-h100",
            "NVIDIA DGX H100: 8 H100 SXM5, NVLink 4, 8 × 400 Gb/s NDR InfiniBand compute NICs",
            "h100-sxm5-80gb",
            "450 GB/s per GPU",
            "8x400Gb/s",
            "NVIDIA DGX H100 datasheet: 8× single-port ConnectX-7 VPI 400 Gb/s NDR InfiniBand (OSFP); NVLink 900 GB/s "
            "bidirectional per GPU, https://resources.nvidia.com/en-us-dgx-systems/ai-enterprise-dgx",
        ),
        _preset(
            "h100-1nic-400g",
            "8 H100 SXM5 with NVLink 4 and one 400 Gb/s NIC per node (shared by its 8 GPUs)",
            "h100-sxm5-80gb",
            "450 GB/s per GPU",
            "1x400Gb/s",
            "NVIDIA ConnectX-7 datasheet (one 400 Gb/s port), "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/networking/ethernet-adapters/connectx-7-datasheet-Final.pdf; "
            "NVLink 900 GB/s bidirectional per GPU (H100 SXM5 datasheet)",
        ),
    ]
}


def get_cluster_preset(key: str, field: str = "cluster.preset") -> ClusterPreset:
    try:
        return CLUSTER_PRESETS[key]
    except KeyError:
        raise ValueError(
            f"unknown cluster preset {key!r}; use one of {', '.join(sorted(CLUSTER_PRESETS))} "
            "(see `meshplan clusters`), or give gpu, gpus_per_node and the bandwidths yourself"
        ) from None


def _unknown(kind: str, field: str, key: str, known: dict) -> UnknownCatalogIdError:
    return UnknownCatalogIdError(
        field,
        f"unknown {kind} id {key!r}",
        f"use one of {', '.join(sorted(known))} (see `meshplan {kind}s`), or give an inline spec",
    )


def get_model(key: str | ModelSpec, field: str = "model") -> ModelSpec:
    if isinstance(key, ModelSpec):
        return key
    try:
        return MODELS[key]
    except KeyError:
        raise _unknown("model", field, key, MODELS) from None


def get_gpu(key: str | GpuSpec, field: str = "cluster.gpu") -> GpuSpec:
    if isinstance(key, GpuSpec):
        return key
    try:
        return GPUS[key]
    except KeyError:
        raise _unknown("gpu", field, key, GPUS) from None
