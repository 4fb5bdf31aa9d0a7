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
            h("thead", {}, h("tr", {}, ["Model", "World size", "Measured step", "Predicted step", "Predicted ÷ measured", "Created"].map((c, i) => h("th", { scope: "col", class: i >= 1 && i <= 4 ? "num" : null }, c)))),
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
  const stepChart = barChart({
    title: "Step time: predicted vs. measured",
    categories: ["predicted", "measured"],
    desc: "Measured is the median step time after the first (warm-up) step.",
    series: [{ name: "step time", color: "#0072B2", values: [(r.predicted_step_time_s || 0) * 1000, r.measured_step_time_s * 1000] }],
    unit: "ms",
    yLabel: "step time (ms)",
    format: (v) => `${fmt.num(v, 1)} ms`,
  });
  const memChart = r.peak_memory_gib_per_rank.length
    ? barChart({
        title: "Peak memory per rank: measured vs. predicted",
        categories: r.peak_memory_gib_per_rank.map((_, i) => `rank ${i}`),
        series: [{ name: "measured peak", color: "#009E73", values: r.peak_memory_gib_per_rank }],
        unit: "GiB",
        yLabel: "peak memory (GiB)",
        lines: r.predicted_peak_memory_gib ? [{ value: r.predicted_peak_memory_gib, label: "predicted peak", color: "#b00020" }] : [],
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
        hlines: r.predicted_step_time_s ? [{ value: r.predicted_step_time_s * 1000, label: "predicted", color: "#b00020" }] : [],
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
        ["Measured step time", fmt.time(r.measured_step_time_s)],
        ["Predicted step time", fmt.time(r.predicted_step_time_s)],
        ["Step time: predicted ÷ measured", ratio(r.step_time_ratio)],
        ["Throughput", `${fmt.si(r.tokens_per_s)} tokens/s`],
        ["Peak memory (max rank)", fmt.gib(r.peak_memory_gib_per_rank.length ? Math.max(...r.peak_memory_gib_per_rank) : null)],
        ["Memory: predicted ÷ measured", ratio(r.memory_ratio)],
      ].map(([k, v]) => h("div", { class: "stat" }, h("dt", {}, k), h("dd", {}, v))),
    ),
    section("run-time", "Time", h("div", { class: "side-by-side" }, stepChart, timesChart)),
    h("div", { class: "side-by-side" }, section("run-memory", "Memory", memChart), section("run-loss", "Loss", lossChart)),
    r.notes.length ? section("run-notes", "Notes", h("ul", {}, r.notes.map((n) => h("li", {}, n)))) : null,
  );
}
