"""The ``Context`` of one request: its inputs and device (``planner.pricing.device.Device``) and the terms
composed from them so far, each cache keyed by what its terms depend on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.pricing.device import Device

if TYPE_CHECKING:
    from planner.compose.cost import Candidate, ClassCosts
    from planner.compose.experts import ExpertFloor, ExpertTerms
    from planner.compose.layer_group import DenseParts, LayerGroup
    from planner.compose.terms import SharedTerms

#: (micro-batch size, tp, sequence parallel, recompute, tp_comm_overlap, ep, etp, block kind): one ``LayerGroup``.
GroupKey = tuple[int, int, bool, str, bool, int, int, str]
#: (micro-batch size, tp, sequence parallel, recompute, ZeRO stage, dp, tp_comm_overlap, ep, etp, pipelined): one
#: ``SharedTerms``.
SharedKey = tuple[int, int, bool, str, int, int, bool, int, int, bool]
#: (ranks per pipeline stage, pp, virtual stages, p2p bytes, the TP ranks a send is scattered over): the lags of a
#: class's chunk boundaries.
LagKey = tuple[int, int, int, int, int]


def _cache() -> dict:
    return field(default_factory=dict, init=False, repr=False, compare=False)


@dataclass
class Context(Device):
    """Everything fixed across candidates (``Inputs``, ``Device``) and the terms composed so far."""

    groups: dict[GroupKey, LayerGroup] = _cache()
    #: the dense op list's part of a ``LayerGroup``, by (mbs, tp, sp, recompute, tp_comm_overlap): shared by a MoE
    #: model's (ep, etp) pairs and block kinds (``layer_group.dense_parts``)
    dense_parts: dict[tuple[int, int, bool, str, bool], DenseParts] = _cache()
    #: ``layer_group.moe_floor``: a MoE block's (forward, backward) ns at least, by (mbs, tp, sp, recompute, tpo, ep,
    #: etp), and ``experts.expert_floor`` by (mbs, tp, sp, recompute, etp)
    moe_floors: dict[tuple[int, int, bool, str, bool, int, int], tuple[int, int]] = _cache()
    expert_floors: dict[tuple[int, int, bool, str, int], ExpertFloor] = _cache()
    a2a_floors: dict[tuple[int, int, bool, int], float] = _cache()  # its all-to-all's seconds, by (mbs, tp, sp, ep)
    #: ``experts.expert_terms`` by (mbs, tp, sp, recompute, ep, etp) (shared with the window view: ``blocks.window_view``)
    expert_terms: dict[tuple, ExpertTerms] = _cache()
    shared: dict[SharedKey, SharedTerms] = _cache()
    #: ``shared``'s memory terms alone, for keys not priced whole (``terms.memory_terms``)
    shared_memory: dict[SharedKey, SharedTerms] = _cache()
    #: ``shared`` with a host's measured pipeline-schedule work added (``terms.class_terms``).
    piped: dict[SharedKey, SharedTerms] = _cache()
    lags: dict[LagKey, list[int]] = _cache()
    classes: dict[Candidate, ClassCosts] = _cache()
    #: ``search.screens.quick_may_fit`` of a class without a cut (the frontier and the search both ask it), by the
    #: class and by ``screens.screen_key`` (its CP exchange only through the bytes it holds); at a cut by (class, cut)
    may_fit: dict[Candidate | tuple, bool] = _cache()
    #: The context-parallel views (``context_parallel.cp_view``), by cp, and the CP classes' terms.
    views: dict[int, Context] = _cache()
    cp_terms: dict[tuple, SharedTerms] = _cache()
    #: ``context_parallel.quick_terms``: a CP class's terms without its exchange and the ns the exchange adds a layer
    cp_quick: dict[tuple, tuple[SharedTerms, int, int]] = _cache()
    #: the CP classes' memory terms (``context_parallel.memory_class_terms``), by their shared key at dp·cp, cp, exchange
    cp_memory: dict[tuple, SharedTerms] = _cache()
    #: (mbs, tp, cp, cp_comm, recompute) -> the exchange's exposed (forward, backward) seconds per block
    cp_exposed: dict[tuple[int, int, int, str, str], tuple[float, float]] = _cache()
    #: a mixed model's dense-kind terms (independent of ep and etp), by their shared key less those and the
    #: model's parameters per rank (``blocks.dense_terms``); the (ep, etp) pairs searched (``options.expert_options``)
    dense_terms: dict[tuple, SharedTerms] = _cache()
    expert_pairs: dict[tuple, list[tuple[int, int]]] = _cache()
    #: ``search.prescreen.heaviest``: per rank, its heaviest activation peak (and its chunks done), by the schedule's
    #: shape and whether the chunks done count
    top_peaks: dict[tuple, tuple] = _cache()
    #: ``experts.dp_seconds`` by its arguments
    dp_seconds: dict[tuple, tuple[float, float, float]] = _cache()
    #: the model's block kinds and, for two, its MoE prefix counts (``terms.block_sequence``)
    blocks: tuple[tuple[str, ...], tuple[int, ...] | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    #: the request priced as if every block had the model's window (``blocks.window_view``)
    window: Context | None = field(default=None, init=False, repr=False, compare=False)
