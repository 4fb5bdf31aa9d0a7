// Runs: reports written by `meshplan run`, shown as predicted versus measured.

import { api } from "../api.js";
import { barChart, lineChart } from "../charts.js";
import { empty, fmt, h, loading, put, section, setTitle } from "../dom.js";
import { describe } from "./plan-parts.js";

export async function runsPage(root, { query }) {
  setTitle("Runs");
  root.append(h("h1", {}, "Runs"), loading("Loading runs"));
  const offset = Math.max(0, Number(query.get("offset") || 0));
  const list = await api("/v1/runs", { query: { limit: 50, offset } });
  put(root, 
    h("h1", {}, "Runs"),
    h("p", { class: "lead" }, "Reports of plans applied with ", h("code", {}, "meshplan run"), ", uploaded with ", h("code", {}, "POST /v1/runs"), "."),
    list.items.length
      ? h(
          "div",
          { class: "table-scroll" },
          h(
            "table",
            { class: "list" },
            h("thead", {}, h("tr", {}, ["Model", "World size", "Measured step", "Plan's prediction (its GPU)", "Plan ÷ measured (same hardware only)", "Created"].map((c, i) => h("th", { scope: "col", class: i >= 1 && i <= 4 ? "num" : null }, c)))),
            h("tbody", {}, list.items.map((r) => h("tr", {}, h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, r.model), h("div", { class: "sub" }, r.id)), h("td", { class: "num" }, r.world_size), h("td", { class: "num" }, fmt.time(r.measured_step_time_s)), h("td", { class: "num" }, fmt.time(r.predicted_step_time_s)), h("td", { class: "num" }, r.step_time_ratio === null || r.step_time_ratio === undefined ? "—" : fmt.num(r.step_time_ratio, 2)), h("td", {}, fmt.date(r.created_at))))),
          ),
        )
      : empty("No run reports stored yet."),
  );
}

export async function runPage(root, { arg: id }) {
  setTitle(`Run ${id}`);
  root.append(h("h1", {}, "Run"), loading("Loading the run report"));
  const stored = await api(`/v1/runs/${encodeURIComponent(id)}`);
  const r = stored.report;
  setTitle(`Run of ${r.model}`);
  const ratio = (x) => (x === null || x === undefined ? "—" : fmt.num(x, 2));
  // Only a prediction for the hardware that ran is set against the measurement: the plan's own (for its
  // GPU) when the run used that GPU (step_time_ratio set), else the plan re-priced for the run's hardware.
  const gpu = r.predicted_on || "the plan's GPU";
  const planComparable = r.step_time_ratio !== null && r.step_time_ratio !== undefined;
  const local = r.local_prediction || null;
  const cmp = local
    ? { label: `predicted for ${local.predicted_on}`, time: local.step_time_s, mem: local.peak_memory_gib }
    : planComparable
      ? { label: `predicted for ${gpu}`, time: r.predicted_step_time_s, mem: r.predicted_peak_memory_gib }
      : null;
  const stepChart = barChart({
    title: cmp ? `Step time on ${r.device}: measured vs. ${cmp.label}` : `Step time on ${r.device}`,
    categories: cmp ? ["measured", cmp.label] : ["measured"],
    desc: "Measured is the median step time after the first (warm-up) step." + (planComparable || !r.predicted_step_time_s ? "" : ` The plan's prediction for ${gpu} is not drawn: it is for other hardware.`),
    series: [{ name: "step time", color: "#0072B2", values: cmp ? [r.measured_step_time_s * 1000, (cmp.time || 0) * 1000] : [r.measured_step_time_s * 1000] }],
    unit: "ms",
    yLabel: "step time (ms)",
    format: (v) => `${fmt.num(v, 1)} ms`,
  });
  const memChart = r.peak_memory_gib_per_rank.length
    ? barChart({
        title: cmp ? `Peak memory per rank: measured vs. ${cmp.label}` : "Peak memory per rank",
        categories: r.peak_memory_gib_per_rank.map((_, i) => `rank ${i}`),
        series: [{ name: "measured peak", color: "#009E73", values: r.peak_memory_gib_per_rank }],
        unit: "GiB",
        yLabel: "peak memory (GiB)",
        lines: cmp && cmp.mem ? [{ value: cmp.mem, label: cmp.label, color: "#b00020" }] : [],
        format: (v) => fmt.gib(v),
      })
    : empty("The report has no memory figures.");
  const lossChart = r.losses.length
    ? lineChart({ title: "Training loss", series: [{ name: "loss", color: "#0072B2", points: r.losses.map((l, i) => [i + 1 + (r.resumed_from_step || 0), l]) }], xLabel: "step", yLabel: "loss" })
    : empty("The report has no losses.");
  const timesChart = r.step_times_s.length
    ? lineChart({
        title: "Step times",
        series: [{ name: "measured step time", color: "#009E73", points: r.step_times_s.map((t, i) => [i + 1 + (r.resumed_from_step || 0), t * 1000]) }],
        hlines: cmp && cmp.time ? [{ value: cmp.time * 1000, label: cmp.label, color: "#b00020" }] : [],
        xLabel: "step",
        yLabel: "step time (ms)",
        format: (v) => `${fmt.num(v, 1)} ms`,
      })
    : empty("The report has no step times.");
  put(root, 
    h("h1", {}, `Run of ${r.model}`),
    h("p", { class: "sub" }, `${r.world_size} ranks on ${r.device} · torch ${r.torch_version} · ${r.steps} steps · batch ${r.global_batch_size} × ${r.seq_len} · ${stored.id} · ${fmt.date(stored.created_at)}`),
    h("p", { class: "config-line" }, describe(r.parallel)),
    h(
      "dl",
      { class: "stats" },
      [
        [`Measured step time (${r.device})`, fmt.time(r.measured_step_time_s)],
        ["Throughput", `${fmt.si(r.tokens_per_s)} tokens/s`],
        ["Peak memory (max rank)", fmt.gib(r.peak_memory_gib_per_rank.length ? Math.max(...r.peak_memory_gib_per_rank) : null)],
        ...(local
          ? [
              [`Predicted for ${local.predicted_on} (this run's hardware)`, fmt.time(local.step_time_s)],
              ["Step time: predicted ÷ measured", ratio(local.step_time_ratio)],
              ["Memory: predicted ÷ measured", ratio(local.memory_ratio)],
            ]
          : []),
        planComparable
          ? [`Plan's prediction for ${gpu} (this run's hardware)`, `${fmt.time(r.predicted_step_time_s)} · ÷ measured ${ratio(r.step_time_ratio)}`]
          : [`Plan's prediction for ${gpu}`, `${fmt.time(r.predicted_step_time_s)} · not comparable with a run on ${r.device}`],
      ].map(([k, v]) => h("div", { class: "stat" }, h("dt", {}, k), h("dd", {}, v))),
    ),
    section("run-time", "Time", h("div", { class: "side-by-side" }, stepChart, timesChart)),
    h("div", { class: "side-by-side" }, section("run-memory", "Memory", memChart), section("run-loss", "Loss", lossChart)),
    local ? h("p", { class: "sub", id: "run-basis" }, `The prediction for ${local.predicted_on} was priced with: ${local.basis}`) : null,
    r.notes.length ? section("run-notes", "Notes", h("ul", {}, r.notes.map((n) => h("li", {}, n)))) : null,
  );
}
