"""What a request fixes for every candidate (``Inputs``): the model, the hardware, the training setup and the
measurements, and the layers they imply (a measured profile's, else the analytic ones: ``layer``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from planner.specs import (
    BYTES_PER_ELEMENT,
    Calibration,
    ClusterSpec,
    GpuSpec,
    LayerProfile,
    ModelSpec,
    NetworkProfile,
    Profile,
    TrainingSpec,
)
from planner.specs.fp8 import recipe_of
from planner.specs.stacks import Stack
from planner.specs.stacks import resolve as resolve_stack
from planner.workload.analytic import layer_profile
from planner.workload.ops import uniform_window, window_share

LayerFn = Callable[[str, int, int, bool], LayerProfile]
#: A layer of the model at one point: (kind, micro-batch size, tp, sequence parallel).
LayerKey = tuple[str, int, int, bool]


@dataclass
class Inputs:
    """Everything fixed across candidates: model, hardware, training setup, measurements."""

    model: ModelSpec
    gpu: GpuSpec
    cluster: ClusterSpec
    training: TrainingSpec
    profile: Profile | None = None
    network: NetworkProfile | None = None
    #: (kind, micro_batch_size, tp, sequence_parallel) -> LayerProfile; default: profile, else analytic.
    layer_fn: LayerFn | None = None
    #: Fraction of the GPU's memory a plan leaves unused (``SearchOptions.memory_headroom``; 0 here: the
    #: request's default is applied by ``planner.answer.request.context``).
    memory_headroom: float = 0.0
    #: The user's calibration (``PlanRequest.calibration``): its residuals replace the built-in ones.
    calibration: Calibration | None = None
    #: The context-parallel degree this view prices (``planner.compose.context_parallel.cp_view``): 1, or cp
    #: with ``training.seq_len`` each rank's s / cp tokens, whose queries attend over cp× the local keys.
    cp: int = 1
    #: The layers found so far (``layer``) and which points the profile covers (``covers``).
    layer_cache: dict[LayerKey, LayerProfile] = field(default_factory=dict, init=False, repr=False, compare=False)
    covers_cache: dict[tuple[int, int, bool], bool] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: ``workload.fp8``'s linears and FP8 state bytes of a layer kind at a TP degree (pure functions of those)
    fp8_cache: dict[tuple, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def elt(self) -> int:
        return BYTES_PER_ELEMENT[self.training.precision]

    @property
    def compute_precision(self) -> str:
        """The precision of everything but the FP8 GEMMs: BF16 under FP8 training (``planner.specs.fp8``)."""
        return "bf16" if self.training.precision == "fp8" else self.training.precision

    @cached_property
    def fp8_recipe(self) -> str | None:
        """The FP8 recipe the request runs (``planner.specs.fp8.recipe_of``); None unless precision is fp8."""
        return recipe_of(self.training, self.stack)

    @cached_property
    def attention_window(self) -> int | None:
        """The window every block attends over at the whole sequence (``training.seq_len`` × ``cp``:
        ``ops.uniform_window``); None when a block attends fully (a model of windowed and full blocks prices each
        kind in a view of its own: ``compose.blocks.window_view``), and on a stack whose kernel does not skip the
        blocks outside the window (``Stack.window_kernel``)."""
        if not self.stack.window_kernel:  # a masked kernel computes the whole square (the bundled runtime's SDPA)
            return None
        return uniform_window(self.model, self.training.seq_len * self.cp)

    @property
    def attention_share(self) -> float:
        """A block's share of the causal attention pairs (``ops.window_share`` of ``attention_window``; 1 without)."""
        return window_share(self.training.seq_len * self.cp, self.attention_window)

    @cached_property
    def stack(self) -> Stack:
        """The training stack the plan is priced for (``planner.specs.stacks``)."""
        return resolve_stack(self.training.stack)

    def layer(self, kind: str, mbs: int, tp: int, sp: bool) -> LayerProfile:
        key = (kind, mbs, tp, sp)
        lp = self.layer_cache.get(key)
        if lp is None:
            lp = self.layer_cache[key] = self._find_layer(kind, mbs, tp, sp)
        return lp

    def _find_layer(self, kind: str, mbs: int, tp: int, sp: bool) -> LayerProfile:
        lp = None
        if self.profile is not None:
            lp = self._profile_index.get((kind, mbs, self.training.seq_len, tp, sp))
        if lp is None and self.layer_fn is not None:
            lp = self.layer_fn(kind, mbs, tp, sp)
        if lp is None:
            lp = layer_profile(
                self.model,
                kind,
                micro_batch_size=mbs,
                seq_len=self.training.seq_len,
                tp=tp,
                sequence_parallel=sp,
                precision=self.training.precision,
                stack=self.stack,
                attention_share=self.attention_share,
            )
        return lp

    @cached_property
    def _profile_index(self) -> dict[tuple, LayerProfile]:
        assert self.profile is not None
        return {
            (lp.kind, lp.micro_batch_size, lp.seq_len, lp.tp, lp.sequence_parallel): lp
            for lp in reversed(self.profile.layers)
        }

    @cached_property
    def profile_kinds(self) -> frozenset[str]:
        return frozenset(lp.kind for lp in self.profile.layers) if self.profile is not None else frozenset()

    def covers(self, mbs: int, tp: int, sp: bool) -> bool:
        """Whether the profile measured every layer kind it holds at (mbs, the request's seq_len, tp, sp);
        True without a profile."""
        if self.profile is None:
            return True
        key = (mbs, tp, sp)
        hit = self.covers_cache.get(key)
        if hit is None:
            seq = self.training.seq_len
            hit = self.covers_cache[key] = all((k, mbs, seq, tp, sp) in self._profile_index for k in self.profile_kinds)
        return hit

    @cached_property
    def profile_points(self) -> str:
        """The (mbs, tp, SP) points the profile covers at the request's seq_len, for notes."""
        assert self.profile is not None
        seq = self.training.seq_len
        pts = sorted(
            {(lp.micro_batch_size, lp.tp, lp.sequence_parallel) for lp in self.profile.layers if lp.seq_len == seq}
        )
        pts = [p for p in pts if self.covers(*p)]
        if not pts:
            return f"no point at seq_len {seq} (it has {sorted({lp.seq_len for lp in self.profile.layers})})"
        return ", ".join(f"mbs {b} tp {t}{' SP' if s else ''}" for b, t, s in pts)
