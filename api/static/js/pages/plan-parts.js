// Pieces of the plan page shared with the what-if comparison: config text, memory and time charts.

import { barChart, stackedRows, timeline } from "../charts.js";
import { fmt } from "../dom.js";

export const MEMORY_PARTS = [
  ["weights_gib", "weights", "#0072B2"],
  ["gradients_gib", "gradients", "#56B4E9"],
  ["optimizer_gib", "optimizer state", "#E69F00"],
  ["activations_gib", "activations", "#009E73"],
  ["buffers_gib", "buffers", "#CC79A7"],
  ["reserve_gib", "reserve (allocator, workspace)", "#7F7F7F"],
];

export const TIME_PARTS = [
  ["compute_s", "compute", "#0072B2"],
  ["tp_comm_s", "tensor-parallel comm.", "#E69F00"],
  ["pp_bubble_s", "pipeline bubble", "#D55E00"],
  ["pp_p2p_s", "pipeline send/recv", "#CC79A7"],
  ["dp_sync_s", "data-parallel sync", "#56B4E9"],
  ["optimizer_s", "optimizer", "#7F7F7F"],
  ["ep_comm_s", "expert-parallel all-to-all", "#F0E442"],
];

/**
 * The rank groups along one dimension of a row-major mesh (planner.layout.mesh_groups): ranks that
 * differ only in that coordinate, in coordinate order; groups in row-major order of the others.
 * A plan carries only the mesh's dim_names and shape.
 */
export function meshGroups(mesh, dim) {
  const d = mesh.dim_names.indexOf(dim);
  if (d < 0) throw new Error(`mesh has no dimension ${dim}`);
  const shape = mesh.shape;
  const strides = shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));
  const others = shape.map((_, i) => i).filter((i) => i !== d);
  const count = others.reduce((a, i) => a * shape[i], 1);
  const groups = [];
  for (let g = 0; g < count; g++) {
    let rest = g;
    let base = 0;
    for (let j = others.length - 1; j >= 0; j--) {
      const i = others[j];
      base += (rest % shape[i]) * strides[i];
      rest = Math.floor(rest / shape[i]);
    }
    groups.push(Array.from({ length: shape[d] }, (_, x) => base + x * strides[d]));
  }
  return groups;
}

/** "tp 8 · pp 2 · dp 4 · mbs 1 · 1f1b · recompute none · SP on · ZeRO 1" */
export function describe(par) {
  const parts = [`tp ${par.tp}`, `pp ${par.pp}`, `dp ${par.dp}`, `micro-batch ${par.micro_batch_size}`, par.virtual_stages > 1 ? `${par.schedule} ×${par.virtual_stages}` : par.schedule, `recompute ${par.recompute}`];
  if (par.sequence_parallel) parts.push("sequence parallel");
  parts.push(`ZeRO ${par.zero_stage}`);
  return parts.join(" · ");
}

export function memoryChart(plan, title = "Memory per GPU by pipeline stage") {
  const e = plan.estimate;
  const stages = e.memory_per_stage;
  const categories = stages.map((_, i) => `stage ${i}`);
  const series = MEMORY_PARTS.map(([k, name, color]) => ({ name, color, values: stages.map((st) => st[k]) }));
  return barChart({
    title,
    desc: `Stacked GiB per GPU on each of ${categories.length} pipeline stages against the ${fmt.gib(e.gpu_memory_gib)} capacity; peak ${fmt.gib(e.peak_memory_gib)}.`,
    categories,
    series,
    stacked: true,
    unit: "GiB",
    yLabel: "memory per GPU (GiB)",
    lines: [{ value: e.gpu_memory_gib, label: "GPU capacity", color: "#b00020" }],
    format: (v) => fmt.gib(v),
  });
}

export function timeChart(plans, labels, title = "Time per optimizer step by cause (critical path)") {
  return stackedRows({
    title,
    desc: "Milliseconds per optimizer step on the critical path, stacked by cause, one bar per configuration.",
    categories: labels,
    series: TIME_PARTS.map(([k, name, color]) => ({ name, color, values: plans.map((p) => p.estimate.breakdown[k] * 1000) })),
    unit: "time per step (ms)",
    format: (v) => `${fmt.num(v, v < 10 ? 2 : 0)} ms`,
  });
}

/** Chrome-trace JSON → the timeline chart (µs → ms, one row per tid = pipeline rank). */
export function traceTimeline(trace, title) {
  const events = (trace && trace.traceEvents) || [];
  const names = new Map();
  for (const ev of events) if (ev.ph === "M" && ev.name === "thread_name" && ev.args) names.set(ev.tid, ev.args.name);
  const byTid = new Map();
  for (const ev of events) {
    if (ev.ph !== "X") continue;
    if (!byTid.has(ev.tid)) byTid.set(ev.tid, []);
    byTid.get(ev.tid).push({
      start: ev.ts / 1000,
      dur: (ev.dur || 0) / 1000,
      kind: ev.cat,
      label: ev.name,
      chunk: ev.args ? ev.args.chunk : undefined,
      tip: `${names.get(ev.tid) || `stage ${ev.tid}`}: ${ev.name}${ev.args && ev.args.microbatch !== undefined ? ` (micro-batch ${ev.args.microbatch}${ev.args.chunk !== undefined ? `, chunk ${ev.args.chunk}` : ""})` : ""} at ${(ev.ts / 1000).toFixed(2)} ms for ${((ev.dur || 0) / 1000).toFixed(2)} ms`,
    });
  }
  const tids = [...byTid.keys()].sort((a, b) => a - b);
  if (!tids.length) return null;
  // Interleaved schedules put several model chunks on a rank: the later chunks are drawn lighter.
  for (const ev of events) {
    if (ev.ph !== "X" || !ev.args || ev.args.chunk === undefined) continue;
    const list = byTid.get(ev.tid);
    if (!list.chunks) list.chunks = new Set();
    list.chunks.add(ev.args.chunk);
  }
  for (const t of tids) {
    const list = byTid.get(t);
    const order = list.chunks ? [...list.chunks].sort((a, b) => a - b) : [];
    if (order.length > 1) list.forEach((b) => Object.assign(b, { chunkIndex: order.indexOf(b.chunk), chunks: order.length }));
  }
  const rows = tids.map((t) => ({ label: names.get(t) || `stage ${t}`, blocks: byTid.get(t).sort((a, b) => a.start - b.start) }));
  return timeline({ title, desc: `${rows.length} pipeline stages; forward and backward blocks per micro-batch; hatched gaps are idle time (the bubble).`, rows, unit: "ms" });
}
