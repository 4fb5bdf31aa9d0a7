"""From a request to what prices it: the ``Context`` (catalog ids resolved, inputs checked), the
configuration an estimate evaluates (``complete_pins``), and the request that re-prices a plan."""

from __future__ import annotations

from planner.answer.residual_notes import check_calibration
from planner.compose.context import Context
from planner.compose.cost import Candidate
from planner.compose.recompute_modules import modules_fp8_error
from planner.search.space import validate_pins
from planner.specs import ModelSpec, ParallelPins, Plan, PlanRequest, SearchOptions, rules
from planner.specs.catalog import GPUS, get_gpu, get_model
from planner.specs.config import SCHEDULE_INFO, estimate_defaults
from planner.specs.errors import MeshplanError
from planner.specs.fp8 import check_fp8
from planner.specs.layout import even_stage_layers
from planner.specs.stack_rules import precision_error, unbuilt_parts, zero_stages_at
from planner.specs.stacks import STACKS, Stack
from planner.specs.stacks import resolve as resolve_stack
from planner.specs.vocab import with_padding

#: Defaults of ``estimate`` for fields the request leaves out (``planner.specs.config.FIELDS``; dp, virtual_stages
#: and stage_layers are derived, see ``complete_pins``).
ESTIMATE_DEFAULTS = estimate_defaults()


def parse_request(request: PlanRequest | dict) -> PlanRequest:
    if isinstance(request, PlanRequest):
        return request
    return PlanRequest.model_validate(request)


def context(request: PlanRequest) -> Context:
    if request.profile_id is not None and request.profile is None:
        raise MeshplanError(
            "profile_id", "a stored profile id is only resolved by the service", "pass the Profile itself as 'profile'"
        )
    model, stack = get_model(request.model), resolve_stack(request.training.stack)
    check_priced(model, stack)
    gpu = get_gpu(request.cluster.gpu)
    rules.check(rules.seq_len_fits(model, request.training.seq_len))
    rules.check(precision_error(stack, request.training.precision))
    check_fp8(request.training, gpu, stack, GPUS)  # FP8 on this GPU and stack
    try:
        gpu.peak_flops(request.training.precision)
    except ValueError as exc:
        raise MeshplanError("training.precision", str(exc), "choose a precision the GPU supports") from None
    if request.profile is not None and request.profile.model.name != model.name:
        raise MeshplanError(
            "profile.model",
            f"the profile is of {request.profile.model.name!r}, not {model.name!r}",
            "profile the requested model",
        )
    if request.profile is not None:
        check_profile_device(request.profile.device, gpu.id)
    if request.calibration_id is not None and request.calibration is None:
        raise MeshplanError(
            "calibration_id",
            "a stored calibration id is only resolved by the service",
            "pass the Calibration itself as 'calibration' (`meshplan plan --calibration cal.json`), or send the "
            "request to the service (POST /v1/plans), which resolves the id",
        )
    if request.calibration is not None:
        check_calibration(request.calibration, gpu.id, stack.id)
    return Context(
        model=with_padding(model, stack),  # the vocabulary as the stack builds it (``planner.specs.vocab``)
        gpu=gpu,
        cluster=request.cluster,
        training=request.training,
        profile=request.profile,
        network=request.network,
        memory_headroom=request.options.memory_headroom,
        calibration=request.calibration,
    )


def check_priced(model: ModelSpec, stack: Stack | None = None) -> None:
    """Refuse a model whose blocks the cost model does not price yet, rather than price them as something else:
    MoE models on a stack without a MoE block (``rules.stack_runs_moe``) and latent attention on a stack whose
    saved tensors for it are not written down: priced as Megatron-core's ``MLASelfAttention`` with Transformer
    Engine keeps them (``workload.moe.mla_saved_terms``, ``activations="te"``) or as the bundled runtime's
    ``runtime.models.mla.LatentAttention`` does (``workload.moe.mla_zoo_saved_terms``: the ``meshplan`` stack). Dense and MoE
    blocks mixed are priced by kind (``compose.blocks``), and so are windowed and full blocks of one kind; both at once
    are refused."""
    if stack is not None:
        rules.check(rules.stack_runs_moe(stack, model, None, None, None))
        for part in unbuilt_parts(stack, model):
            # the presets that build every part of the model (and run MoE when it is one)
            builds = [s.id for s in STACKS.values() if not unbuilt_parts(s, model) and (s.moe or model.moe is None)]
            raise MeshplanError(
                "training.stack",
                f"{model.name!r} has model.{part}, which stack {stack.id!r} does not build (`meshplan stacks`)",
                f"plan it for a stack that runs it (training.stack: {' or '.join(builds) or 'none yet'})",
            )
    # "zoo" activations on another stack (DeepSpeed) are a user's PyTorch model, whose MLA tensors are not written down;
    # the meshplan stack with overrides (``stack_override.resolve``: id "meshplan+{…}", e.g. `meshplan run`'s local
    # prediction) is still the bundled runtime
    runtime = stack is not None and stack.activations == "zoo" and stack.id.partition("+")[0] == "meshplan"
    if model.mla is not None and (stack is None or (stack.activations != "te" and not runtime)):
        raise MeshplanError(
            "training.stack",
            f"{model.name!r} uses multi-head latent attention (model.mla), priced as Megatron-core runs it "
            f"(MLASelfAttention with Transformer Engine) or as the bundled runtime does; "
            f"{'this stack' if stack is None else repr(stack.id)} has no priced latent attention",
            "plan it on training.stack megatron (--stack megatron) or meshplan (the default)",
        )
    windowed = model.window_layers()
    if (
        0 < windowed < model.num_layers
        and model.moe is not None
        and model.moe.first_dense_layers + (model.moe.moe_layer_freq > 1)
    ):
        raise MeshplanError(
            "model.sliding_window",
            f"{model.name!r} has dense and MoE blocks and a sliding window on {windowed} of its {model.num_layers} "
            "layers: up to four kinds of layer, and the planner's stage cuts price two",
            "give every layer the window (window_first_layer 0, window_layer_freq 1) or none, or make every layer "
            "MoE (moe.first_dense_layers 0, moe.moe_layer_freq 1)",
        )


#: Profile devices that measured no time (FLOPs and bytes only): they fit any GPU.
DEVICELESS = {"meta", "analytic"}


def check_profile_device(device: str, gpu_id: str) -> None:
    """A profile measured on one device prices layers with that device's times: it must be the cluster's
    GPU. ``device`` is what the profiler recorded (``torch.cuda.get_device_name()``, e.g. 'NVIDIA H100
    80GB HBM3', or 'cpu'); it matches ``gpu_id`` when the id's model ('h100' of 'h100-sxm5-80gb')
    appears in it and, where both state a memory size ('80GB', '80gb'), the sizes agree."""
    import re

    name = device.lower()
    if name in DEVICELESS or name == gpu_id.lower():  # the latter: a GPU spec named for the profiled device
        return
    model, *_ = gpu_id.lower().split("-")
    stated, listed = set(re.findall(r"(\d+)\s*gb", name)), set(re.findall(r"(\d+)\s*gb", gpu_id.lower()))
    same_model = model in re.split(r"[^a-z0-9]+", name) or model in name.replace(" ", "")
    if same_model and (not (stated and listed) or stated & listed):
        return
    raise MeshplanError(
        "profile.device",
        f"the profile was measured on {device!r}, but the cluster's GPU is {gpu_id!r}: its times are not this GPU's",
        f"measure the profile on the cluster's GPU ({gpu_id}: `meshplan profile model --device cuda` there), "
        "set cluster.gpu to the profiled device, or use a meta/analytic profile (`--device meta`), which "
        "has no times",
    )


def replay_request(plan: Plan) -> PlanRequest:
    """The request that re-estimates ``plan`` with the inputs that priced it: ``estimate_plan`` of it
    gives the plan's own estimate when ``plan.inputs.cost_model_version`` is the current one. TP
    across nodes is allowed (the plan's own layout is being priced, not searched)."""
    return PlanRequest(
        model=plan.model,
        cluster=plan.cluster,
        training=plan.training,
        parallel=ParallelPins(**plan.parallel.model_dump()),
        profile=plan.inputs.profile,
        network=plan.inputs.network,
        calibration=plan.inputs.calibration,
        options=SearchOptions(allow_tp_across_nodes=True, memory_headroom=plan.estimate.memory_headroom),
    )


def default_zero(stack: Stack, pp: int, shard_group: int) -> int:
    """``estimate``'s ZeRO stage: the default (ZeRO-0), or the first the stack runs where it runs no ZeRO-0 (torchtitan
    1ea476e9 shards every data-parallel group: ZeRO-3)."""
    runs = zero_stages_at(stack, pp)
    zero = ESTIMATE_DEFAULTS["zero_stage"]
    return zero if zero in runs or shard_group == 1 else runs[0]


def complete_pins(ctx: Context, request: PlanRequest) -> tuple[Candidate, list[int]]:
    """The configuration ``estimate`` evaluates: the pins plus ``ESTIMATE_DEFAULTS``; dp fills the
    cluster; stage_layers default to an even split (remainder to the middle chunks)."""
    pins = request.parallel
    validate_pins(ctx, pins, request.options)
    d = ESTIMATE_DEFAULTS
    schedule = pins.schedule or d["schedule"]
    v = pins.virtual_stages or SCHEDULE_INFO[schedule].fixed_virtual_stages or 2
    tp = pins.tp or d["tp"]
    if pins.pp is not None:
        pp = pins.pp
    elif pins.stage_layers is not None:
        pp = max(1, len(pins.stage_layers) // v)
    else:
        pp = d["pp"]
    n_gpus, cp = ctx.num_gpus, pins.cp or 1
    cp_comm = pins.cp_comm or d["cp_comm"]
    if pins.dp is not None:
        dp = pins.dp
    else:
        rules.check(rules.degrees_divide(tp, pp, None, n_gpus // cp))
        dp = n_gpus // (tp * pp * cp)
    rules.check(rules.degrees_product(tp, pp, dp, n_gpus, cp=cp))
    gbs = ctx.training.global_batch_size
    # a stack without accumulation at pp = 1 runs one micro-batch a step (``Stack.accumulation``)
    whole = pp == 1 and not ctx.stack.accumulation and gbs % dp == 0
    mbs = pins.micro_batch_size or (gbs // dp if whole else d["micro_batch_size"])
    rules.check(rules.batch_divides(gbs, dp, mbs))
    m = gbs // (dp * mbs)
    rules.check(
        rules.schedule_priced(schedule),
        rules.virtual_stages_fit(schedule, v),
        rules.interleaving_needs_pipeline(pp, v),
        rules.interleaved_microbatches_priced(schedule, pp, m),
    )
    short = rules.one_f_one_b_microbatches(schedule, pp, m, gbs, dp)
    if short is not None:
        raise short if pins.micro_batch_size is not None else rules.with_field(short, "parallel.schedule")
    L = ctx.model.num_layers
    rules.check(rules.pp_fits_layers(pp, v, L))
    sp_default = d["sequence_parallel"] or not ctx.stack.tp_without_sp  # torchtitan ≤ 9dec370: SP with every TP
    sp = bool((pins.sequence_parallel if pins.sequence_parallel is not None else sp_default) and tp > 1)
    rules.check(
        rules.sequence_parallel_splits_seq(sp, tp, ctx.training.seq_len),
        rules.cp_splits_seq(cp, ctx.training.seq_len, tp, sp),
        rules.cp_splits_heads(ctx.model, tp, cp, cp_comm),
    )
    cand = Candidate(
        tp,
        pp,
        dp,
        mbs,
        schedule,
        v,
        pins.recompute or d["recompute"],
        sp,
        pins.zero_stage if pins.zero_stage is not None else default_zero(ctx.stack, pp, dp * cp),
        bool(pins.tp_comm_overlap),
        cp=cp,
        cp_comm=cp_comm,
        ep=pins.ep or 1,
        # Megatron-core's default ETP = TP, where the stack runs it (the bundled runtime runs etp 1 only)
        etp=pins.etp or (tp if ctx.model.moe is not None and "tp" in ctx.stack.etp else 1),
    )
    rules.check(rules.tp_overlap_needs_sp(cand.tp_comm_overlap, tp, sp))
    rules.check(rules.expert_parallel_rules(ctx.stack, ctx.model, cand))
    rules.check(rules.stack_runs_config(ctx.stack, ctx.model, cand, gbs))  # what the training stack runs (issue 27)
    rules.check(modules_fp8_error(ctx, cand.recompute))  # --recompute-modules under delayed FP8
    if pins.stage_layers is not None:
        rules.check(rules.stage_layers_count(pins.stage_layers, pp, v))
    n = list(pins.stage_layers) if pins.stage_layers is not None else even_stage_layers(L, pp * v)
    rules.check(rules.stage_layers_nonempty(n, ends_may_be_empty=False))
    return cand, n
