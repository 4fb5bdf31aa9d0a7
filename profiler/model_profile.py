"""Per-layer profiles of the model zoo (``runtime.models``): one instance of each layer kind
(embedding, transformer block, final norm + LM head) at each tensor-parallel width, measured at each
micro-batch size.

``device="meta"``: nothing is allocated, any model size. Layers are built on the meta device and
materialised as fake CPU tensors (``FakeTensorMode``), so attention dispatches to PyTorch's *fused*
CPU flash kernel: what it saves for backward (Q, K, V, output, log-sum-exp; no s×s matrix) is what a
fused GPU kernel keeps. (Plain meta tensors would take the math path and save the s×s probabilities.)
``device="cpu"``/``"cuda"``: real tensors; forward/backward times and peak memory are added.

Sequence parallelism is emulated on one process: the layer gets its sequence shard [b, s/t, h]; the
all-gather in front of attention, MLP and LM head is stood in for by a ``repeat`` along the sequence
(a fresh full-length tensor, saving nothing, like the all-gather) and the reduce-scatter behind
attention and MLP by keeping the first s/t positions, so norms run on s/t tokens and the gathered
QKV/FFN inputs are kept whole, as in the DTensor runtime.

The vocabulary is split only when t divides it (``planner.specs.layout.tp_plan``); otherwise embedding and
LM head are measured at full width.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

from planner.specs import ActivationBytes, LayerProfile, ModelSpec, Profile, rules
from planner.specs.errors import MeshplanError
from planner.workload.analytic import LAYER_KINDS, check_tp, layer_profile, vocab_parallel
from profiler.activations import RECOMPUTE_MODES, SavedTensorBytes, saved_bytes
from profiler.flops import flop_counter
from profiler.timing import peak_memory, time_fwd_bwd

DEVICES = ("meta", "cpu", "cuda")
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

METHOD_NOTES = {
    "meta": (
        "meta: measured under FakeTensorMode (nothing allocated) with the fused CPU flash-attention kernel, "
        "so saved activations are what a fused kernel keeps (no s×s matrix); FLOPs by FlopCounterMode, the "
        "fused kernel counted with torch's sdpa_flop_count / sdpa_backward_flop_count"
    ),
    "cpu": (
        "cpu: real tensors, fused CPU flash attention; times are medians (perf_counter); peak memory is "
        "tracked tensor allocations (torch MemTracker), an approximation of the allocator's peak"
    ),
    "cuda": "cuda: real tensors; times are medians of CUDA-event intervals; peak memory is max_memory_allocated",
}
SP_NOTE = (
    "sequence_parallel records: collectives emulated on one process (all-gather = repeat along the "
    "sequence, reduce-scatter = keep the local shard)"
)


def layer_tp(model: ModelSpec, kind: str, tp: int) -> int:
    """The TP width a layer kind is built at: embedding and LM head stay whole unless t divides V."""
    if kind in ("embedding", "lm_head") and not vocab_parallel(model, tp):
        return 1
    return tp


# ------------------------------------------------------------------------------------------------
# Building layers


def _build(model: ModelSpec, kind: str, tp: int, device: str, dtype: torch.dtype) -> nn.Module:
    from runtime.models import build_layer

    width = layer_tp(model, kind, tp)
    if device == "meta":
        # Built on meta (no memory) outside the fake mode; ``_materialise`` gives it fake CPU storage.
        return build_layer(model, kind, tp=width, device="meta", dtype=dtype)
    return build_layer(model, kind, tp=width, seed=0, device=device, dtype=dtype)


def _materialise(layer: nn.Module, device: str) -> nn.Module:
    """Inside ``_mode(device)``: meta layers become fake CPU layers; real ones stay."""
    return layer.to_empty(device="cpu") if device == "meta" else layer


def _mode(device: str) -> contextlib.AbstractContextManager:
    if device == "meta":
        from torch._subclasses.fake_tensor import FakeTensorMode

        # allow_non_fake_inputs: to_empty reads the meta parameters it replaces.
        return FakeTensorMode(allow_non_fake_inputs=True)
    return contextlib.nullcontext()


@contextlib.contextmanager
def emulate_sequence_parallel(layer: nn.Module, kind: str, tp: int) -> Iterator[None]:
    """Emulate sequence-parallel collectives on one process (see the module docstring)."""

    def gather(_module, args):
        return (args[0].repeat(1, tp, 1), *args[1:])

    def scatter(_module, _args, out):
        return out.narrow(1, 0, out.shape[1] // tp)

    handles = []
    if kind == "transformer_block":
        # a MoE block's router and routed experts take the sequence shard as it is (runtime.expert_parallel); its
        # shared expert is split like the dense MLP
        mlp = layer.mlp if layer.mlp is not None else layer.moe.shared
        for sub in (layer.attn, mlp):
            if sub is not None:
                handles += [sub.register_forward_pre_hook(gather), sub.register_forward_hook(scatter)]
    elif kind == "embedding":
        handles.append(layer.register_forward_hook(scatter))
    else:
        handles.append(layer.head.register_forward_pre_hook(gather))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ------------------------------------------------------------------------------------------------
# Measuring


def _input_maker(
    model: ModelSpec, layer: nn.Module, kind: str, b: int, s: int, tp: int, sp: bool, device: str, dtype: torch.dtype
) -> Callable[[], torch.Tensor]:
    dev = "cpu" if device == "meta" else device
    if kind == "embedding":
        vocab = layer.tok.num_embeddings
        return lambda: torch.randint(0, vocab, (b, s), device=dev)
    tokens = s // tp if sp else s
    return lambda: torch.randn(b, tokens, model.hidden_size, device=dev, dtype=dtype, requires_grad=True)


def measure_layer(
    model: ModelSpec,
    layer: nn.Module,
    kind: str,
    *,
    micro_batch_size: int,
    seq_len: int,
    tp: int,
    sequence_parallel: bool,
    device: str,
    dtype: str,
    warmup: int = 2,
    repeats: int = 5,
) -> LayerProfile:
    """One ``LayerProfile`` of an already built ``layer`` (inside the device's mode)."""
    torch_dtype = TORCH_DTYPES[dtype]
    make_input = _input_maker(model, layer, kind, micro_batch_size, seq_len, tp, sequence_parallel, device, torch_dtype)

    def forward() -> torch.Tensor:
        return layer(make_input())

    sp_ctx = emulate_sequence_parallel(layer, kind, tp) if sequence_parallel else contextlib.nullcontext()
    with sp_ctx:
        # One pass gives the FLOPs, the bytes saved without recomputation and the output size.
        counter = flop_counter()
        with counter:
            with SavedTensorBytes(layer) as saved_none:
                out = forward()
            fwd_flops = counter.get_total_flops()
            output_bytes = out.numel() * out.element_size()
            out.backward(torch.ones_like(out))
            bwd_flops = counter.get_total_flops() - fwd_flops
        del out
        layer.zero_grad(set_to_none=True)
        saved = {"none": saved_none.nbytes}
        for mode in RECOMPUTE_MODES[1:]:
            # Embedding and LM head are never recomputed: their bytes are the same in every mode.
            saved[mode] = saved_bytes(layer, kind, mode, forward) if kind == "transformer_block" else saved["none"]
        times: tuple[float | None, float | None] = (None, None)
        peak = None
        if device != "meta":
            dev = torch.device(device)
            times = time_fwd_bwd(layer, make_input, dev, warmup=warmup, repeats=repeats)
            peak = peak_memory(layer, make_input, dev)
    params = list(layer.parameters())
    return LayerProfile(
        kind=kind,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        tp=tp,
        sequence_parallel=sequence_parallel,
        fwd_flops=float(fwd_flops),
        bwd_flops=float(bwd_flops),
        param_count=sum(p.numel() for p in params),
        param_bytes=sum(p.numel() * p.element_size() for p in params),
        saved_activation_bytes=ActivationBytes(**saved),
        output_activation_bytes=output_bytes,
        fwd_time_s=times[0],
        bwd_time_s=times[1],
        peak_memory_bytes=peak,
    )


# ------------------------------------------------------------------------------------------------
# Validation


def _parse_ints(values: Sequence[int], field: str) -> list[int]:
    out = list(values)
    if not out:
        raise MeshplanError(field, "no values given", "give at least one, e.g. 1,2,4")
    for v in out:
        if v < 1:
            raise MeshplanError(field, f"{v} is not a positive integer", "use positive integers, e.g. 1,2,4")
    return sorted(set(out))


def _available_bytes(device: str) -> int | None:
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def validate(
    model: ModelSpec,
    *,
    device: str,
    micro_batch_sizes: Sequence[int],
    tps: Sequence[int],
    seq_len: int,
    sequence_parallel: bool,
    dtype: str,
) -> tuple[list[int], list[int]]:
    """Check the request; return the sorted distinct micro-batch sizes and TP degrees."""
    if device not in DEVICES:
        raise MeshplanError("device", f"unknown device {device!r}", f"use one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise MeshplanError(
            "device", "no CUDA device is available", "use --device cpu, or --device meta for FLOPs and bytes only"
        )
    if dtype not in TORCH_DTYPES:
        raise MeshplanError("dtype", f"unknown dtype {dtype!r}", f"use one of {', '.join(TORCH_DTYPES)}")
    mbs = _parse_ints(micro_batch_sizes, "micro_batch_sizes")
    tp_list = _parse_ints(tps, "tp")
    for tp in tp_list:
        check_tp(model, tp)
    if not 1 <= seq_len <= model.max_seq_len:
        raise MeshplanError(
            "seq_len",
            f"{seq_len} is outside 1..{model.max_seq_len} (the model's max_seq_len)",
            f"use a sequence length between 1 and {model.max_seq_len}",
        )
    for tp in tp_list:
        err = rules.sequence_parallel_splits_seq(sequence_parallel, tp, seq_len)
        if err is not None:
            raise rules.with_field(err, "seq_len")
    if device != "meta":
        # Refuse runs that cannot fit (the biggest point: smallest tp, largest micro-batch).
        need = sum(
            _rough_bytes(
                layer_profile(model, kind, micro_batch_size=mbs[-1], seq_len=seq_len, tp=tp_list[0], precision=dtype)
            )
            for kind in LAYER_KINDS
        )
        have = _available_bytes(device)
        if have is not None and need > 0.8 * have:
            raise MeshplanError(
                "device",
                f"measuring needs about {need / 2**30:.1f} GiB but {device} has {have / 2**30:.1f} GiB free",
                "use --device meta (FLOPs and bytes without allocating), or smaller --micro-batch-sizes/--seq-len",
            )
    return mbs, tp_list


def _rough_bytes(p: LayerProfile) -> int:
    # parameters + gradients + saved activations + output, ×1.5 for temporaries.
    return int(1.5 * (2 * p.param_bytes + p.saved_activation_bytes.none + p.output_activation_bytes))


# ------------------------------------------------------------------------------------------------
# Whole profile


def profile_model(
    model: ModelSpec,
    *,
    device: str = "meta",
    micro_batch_sizes: Sequence[int] = (1,),
    tps: Sequence[int] = (1,),
    seq_len: int | None = None,
    sequence_parallel: bool = False,
    dtype: str = "bf16",
    warmup: int = 2,
    repeats: int = 5,
    progress: bool = False,
) -> Profile:
    """Profile every layer kind of ``model`` at every (TP degree, micro-batch size).

    ``sequence_parallel=True`` adds sequence-parallel records for every t > 1 beside the plain ones.
    ``seq_len`` defaults to the model's ``max_seq_len``.
    """
    seq_len = model.max_seq_len if seq_len is None else seq_len
    mbs, tp_list = validate(
        model,
        device=device,
        micro_batch_sizes=micro_batch_sizes,
        tps=tps,
        seq_len=seq_len,
        sequence_parallel=sequence_parallel,
        dtype=dtype,
    )
    plan = [(tp, [False, True] if sequence_parallel and tp > 1 else [False]) for tp in tp_list]
    total = sum(len(sps) for _, sps in plan) * len(mbs) * len(LAYER_KINDS)
    layers: list[LayerProfile] = []
    with _progress(progress, total, f"profiling {model.name} on {device}") as advance:
        for tp, sps in plan:
            for kind in LAYER_KINDS:
                layer = _build(model, kind, tp, device, TORCH_DTYPES[dtype])
                with _mode(device):
                    layer = _materialise(layer, device)
                    for sp in sps:
                        for b in mbs:
                            layers.append(
                                measure_layer(
                                    model,
                                    layer,
                                    kind,
                                    micro_batch_size=b,
                                    seq_len=seq_len,
                                    tp=tp,
                                    sequence_parallel=sp,
                                    device=device,
                                    dtype=dtype,
                                    warmup=warmup,
                                    repeats=repeats,
                                )
                            )
                            advance(f"{kind} tp={tp}{' sp' if sp else ''} mbs={b}")
                    del layer
    notes = [METHOD_NOTES[device]] + ([SP_NOTE] if sequence_parallel else [])
    return Profile(
        model=model,
        device=torch.cuda.get_device_name() if device == "cuda" else device,
        dtype=dtype,
        torch_version=torch.__version__,
        source="meta" if device == "meta" else "measured",
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        layers=layers,
        notes=notes,
    )


@contextlib.contextmanager
def _progress(enabled: bool, total: int, title: str) -> Iterator[Callable[[str], None]]:
    if not enabled:
        yield lambda _label: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[label]}"),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(title, total=total, label="")

        def advance(label: str) -> None:
            bar.update(task, advance=1, label=label)

        yield advance
        bar.update(task, completed=total)
