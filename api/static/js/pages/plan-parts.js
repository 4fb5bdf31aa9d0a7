// Pieces of the plan page shared with the what-if comparison: config text, memory and time charts.

import { barChart, meshGrid, stackedRows, timeline } from "../charts.js";
import { fmt } from "../dom.js";

export const MEMORY_PARTS = [
  ["weights_gib", "weights", "#0072B2"],
  ["gradients_gib", "gradients", "#56B4E9"],
  ["optimizer_gib", "optimizer state", "#E69F00"],
  ["activations_gib", "activations", "#009E73"],
  ["buffers_gib", "buffers", "#CC79A7"],
  ["reserve_gib", "reserve (allocator, workspace)", "#7F7F7F"],
];

/** A mixture of experts' part of the weights, gradients and optimizer state (``StageMemory.expert_*_gib``): drawn
 * apart from the rest of each when a plan has routed experts (key, its expert key, label, colour). */
export const EXPERT_MEMORY_PARTS = [
  ["weights_gib", "expert_weights_gib", "expert weights (routed experts)", "#003F6B"],
  ["gradients_gib", "expert_gradients_gib", "expert gradients", "#1B6F9E"],
  ["optimizer_gib", "expert_optimizer_gib", "expert optimizer state", "#8A5A00"],
];

/** The memory chart's series for some stages: MEMORY_PARTS, and for a mixture of experts each state split into the
 * routed experts' part and the rest ("weights (non-expert)", "expert weights (routed experts)", …), so the stacked
 * GiB still add up to the stage's total. → [{name, color, values}] */
export function memorySeries(stages) {
  const moe = stages.some((st) => EXPERT_MEMORY_PARTS.some(([, ek]) => st[ek] > 0));
  const out = [];
  for (const [k, name, color] of MEMORY_PARTS) {
    const expert = moe ? EXPERT_MEMORY_PARTS.find(([key]) => key === k) : null;
    if (!expert) {
      out.push({ name, color, values: stages.map((st) => st[k]) });
      continue;
    }
    const [, ek, ename, ecolor] = expert;
    out.push({ name: `${name} (non-expert)`, color, values: stages.map((st) => st[k] - (st[ek] || 0)) });
    out.push({ name: ename, color: ecolor, values: stages.map((st) => st[ek] || 0) });
  }
  return out;
}

/**
 * The expert layers' rank groups of a mixture-of-experts plan (Megatron-core's "parallel folding", as the planner
 * prices it: the tp × cp × dp ranks of a pipeline stage, in rank order, are etp × ep × expert-dp for the expert
 * layers, etp innermost). → {ep: [[ranks]] (the all-to-all groups), edp: [[ranks]] (expert-data-parallel: an
 * expert's replicas, its gradient sync)}; none for ep = 1.
 */
export function expertGroups(plan) {
  const p = plan.parallel;
  const ep = p.ep || 1;
  const etp = p.etp || 1;
  if (ep === 1) return { ep: [], edp: [] };
  const stage = p.tp * (p.cp || 1) * p.dp;
  const edp = stage / (ep * etp);
  const rank = (s, d, e, t) => s * stage + t + etp * (e + ep * d);
  const epGroups = [];
  const edpGroups = [];
  for (let s = 0; s < p.pp; s++) {
    for (let d = 0; d < edp; d++) for (let t = 0; t < etp; t++) epGroups.push(Array.from({ length: ep }, (_, e) => rank(s, d, e, t)));
    for (let e = 0; e < ep; e++) for (let t = 0; t < etp; t++) edpGroups.push(Array.from({ length: edp }, (_, d) => rank(s, d, e, t)));
  }
  return { ep: epGroups, edp: edpGroups };
}

/** The time-breakdown terms this page has words for, in drawing order (key, label, colour). */
export const TIME_PARTS = [
  ["compute_s", "compute", "#0072B2"],
  ["tp_comm_s", "tensor-parallel comm.", "#E69F00"],
  ["cp_comm_s", "context-parallel comm.", "#009E73"],
  ["ep_comm_s", "expert-parallel all-to-all", "#332288"],
  ["pp_bubble_s", "pipeline bubble", "#D55E00"],
  ["pp_p2p_s", "pipeline send/recv", "#CC79A7"],
  ["dp_sync_s", "data-parallel sync", "#56B4E9"],
  ["optimizer_s", "optimizer", "#7F7F7F"],
];
/** Colours for terms without an entry above. */
const EXTRA_COLORS = ["#F0E442", "#88CCEE", "#117733", "#AA4499", "#44AA99", "#999933"];
/** Terms that are not communication (the rest of the breakdown is). */
const NOT_COMM = new Set(["compute_s", "pp_bubble_s", "optimizer_s"]);

/** A breakdown term's words: its label, or "<key without _s, underscores as spaces>". */
export function timeLabel(key) {
  const known = TIME_PARTS.find(([k]) => k === key);
  return known ? known[1] : key.replace(/_s$/, "").replace(/_/g, " ");
}

/**
 * The terms to draw for some TimeBreakdowns: every `*_s` field any of them carries (so terms the API adds —
 * cp_comm_s, ep_comm_s, … — appear without more dashboard work), the known ones in TIME_PARTS order, then the
 * others in name order with a fallback label and colour. → [[key, label, colour]]
 */
export function breakdownParts(breakdowns) {
  const keys = new Set();
  for (const b of breakdowns) for (const [k, v] of Object.entries(b || {})) if (k.endsWith("_s") && typeof v === "number") keys.add(k);
  const known = TIME_PARTS.filter(([k]) => keys.has(k));
  const others = [...keys].filter((k) => !TIME_PARTS.some(([x]) => x === k)).sort();
  return [...known, ...others.map((k, i) => [k, timeLabel(k), EXTRA_COLORS[i % EXTRA_COLORS.length]])];
}

/** Seconds of exposed communication in a breakdown: every `*_s` term but compute, bubble and optimizer. */
export function commSeconds(b) {
  return Object.entries(b || {}).reduce((a, [k, v]) => (k.endsWith("_s") && !NOT_COMM.has(k) && typeof v === "number" ? a + v : a), 0);
}

/** "bf16", or "fp8 (delayed)" with the FP8 recipe when the training spec names one. */
export function precisionText(t) {
  if (t.precision !== "fp8") return t.precision;
  const stack = !t.stack ? "meshplan" : typeof t.stack === "string" ? t.stack : t.stack.base || "meshplan";
  return `fp8 (${t.fp8_recipe || `${stack}'s default recipe`})`;
}

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

/** "tp 8 · pp 2 · dp 4 · (cp 2 (p2p) ·) (ep 4 (etp 2) ·) mbs 1 · 1f1b · recompute none · SP on · ZeRO 1" */
export function describe(par) {
  const cp = par.cp > 1 ? [`cp ${par.cp} (${par.cp_comm || "p2p"})`] : [];
  const ep = (par.ep || 1) > 1 || (par.etp || 1) > 1 ? [`ep ${par.ep || 1}${(par.etp || 1) > 1 ? ` (etp ${par.etp})` : ""}`] : [];
  const parts = [`tp ${par.tp}`, `pp ${par.pp}`, `dp ${par.dp}`, ...cp, ...ep, `micro-batch ${par.micro_batch_size}`, par.virtual_stages > 1 ? `${par.schedule} ×${par.virtual_stages}` : par.schedule, `recompute ${par.recompute}`];
  if (par.sequence_parallel) parts.push("sequence parallel");
  parts.push(`ZeRO ${par.zero_stage}`);
  return parts.join(" · ");
}

export function memoryChart(plan, title = "Memory per GPU by pipeline stage") {
  const e = plan.estimate;
  const stages = e.memory_per_stage;
  const categories = stages.map((_, i) => `stage ${i}`);
  const series = memorySeries(stages);
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
    series: breakdownParts(plans.map((p) => p.estimate.breakdown)).map(([k, name, color]) => ({ name, color, values: plans.map((p) => (p.estimate.breakdown[k] || 0) * 1000) })),
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

/** The device mesh of a plan (its cluster, parallel config and mesh shape): stages, TP groups and, with
 * cp > 1, the cp axis (mesh order pp, dp, cp, tp: planner.specs.layout). */
export function meshFigure(plan) {
  const c = plan.cluster;
  const rankMap = (dim) => {
    const out = new Map();
    meshGroups(plan.mesh, dim).forEach((grp) => grp.forEach((r, i) => out.set(r, i)));
    return out;
  };
  const stage = rankMap("pp");
  const dp = rankMap("dp");
  const hasCp = plan.mesh.dim_names.includes("cp");
  const cp = hasCp ? rankMap("cp") : null;
  const p = plan.parallel;
  const cpWords = hasCp ? `, dashed line = CP group of ${p.cp} (${p.cp_comm || "p2p"})` : "";
  // a mixture of experts with ep > 1: its expert layers' EP groups (the all-to-all) beside the dense TP × DP
  const experts = expertGroups(plan);
  const hasEp = experts.ep.length > 0;
  const epOf = new Map();
  const edpOf = new Map();
  experts.ep.forEach((grp) => grp.forEach((r, i) => epOf.set(r, i)));
  experts.edp.forEach((grp) => grp.forEach((r, i) => edpOf.set(r, i)));
  const edp = hasEp ? experts.edp[0].length : 0;
  const epWords = hasEp ? `, dotted line = EP group of ${p.ep} (expert layers: ETP ${p.etp || 1} × EP ${p.ep} × expert-DP ${edp})` : "";
  return meshGrid({
    title: `Device mesh: ${c.num_nodes} nodes × ${c.gpus_per_node} GPUs — colour and “S” = pipeline stage, outline = TP group of ${p.tp}${cpWords}${epWords}`,
    desc: `${p.pp} pipeline stages, ${p.dp} data-parallel replicas, ${hasCp ? `context-parallel groups of ${p.cp}, ` : ""}tensor-parallel groups of ${p.tp}${hasEp ? `; expert layers: ${experts.ep.length} expert-parallel groups of ${p.ep} (all-to-all of the tokens), ${experts.edp.length} expert-data-parallel groups of ${edp} (an expert's replicas)` : ""}; mesh dims ${plan.mesh.dim_names.join(", ")}; r = global rank, d = data-parallel replica${hasCp ? ", c = context-parallel rank" : ""}${hasEp ? ", e = expert-parallel rank (the experts it holds: e × experts/ep onwards), x = expert-data-parallel replica" : ""}.`,
    epOf: hasEp ? (r) => epOf.get(r) : null,
    edpOf: hasEp ? (r) => edpOf.get(r) : null,
    epGroups: experts.ep,
    numNodes: c.num_nodes,
    gpusPerNode: c.gpus_per_node,
    stageOf: (r) => (stage.has(r) ? stage.get(r) : null),
    dpOf: (r) => dp.get(r),
    tpGroups: meshGroups(plan.mesh, "tp"),
    cpOf: hasCp ? (r) => cp.get(r) : null,
    cpGroups: hasCp ? meshGroups(plan.mesh, "cp") : [],
    numStages: p.pp,
  });
}
