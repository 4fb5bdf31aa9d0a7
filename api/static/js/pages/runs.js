// Runs: reports written by `meshplan run`, shown as predicted versus measured.

import { api } from "../api.js";
import { barChart, lineChart } from "../charts.js";
import { empty, errorBox, fmt, h, loading, put, section, setTitle } from "../dom.js";
import { calibrationLabel } from "./new-plan.js";
import { describe } from "./plan-parts.js";

/** Whether a run on ``device`` ran on the catalog GPU ``gpuId`` (as runtime/report.py same_hardware:
 * a CPU never does; a CUDA device name contains the GPU id's product, e.g. H100). */
export function sameHardware(device, gpuId) {
  if (!device || device === "cpu" || !gpuId) return false;
  const product = gpuId.toLowerCase().split("-")[0];
  return device.toLowerCase().replace(/[\s-]/g, "").includes(product);
}

/** predicted ÷ measured: two decimals, or three significant digits below 0.1 (a GPU estimate far
 * below a measurement must not read 0.00). */
export function ratioText(x) {
  return x >= 0.1 ? fmt.num(x, 2) : String(Number(x.toPrecision(3)));
}

/** The estimate request for a run's own configuration on ``cluster``, priced for ``stack`` (the
 * report holds the model, the complete parallel configuration, the batch and sequence length). */
export function runRequest(r, { gpu, numNodes, gpusPerNode, precision, stack }) {
  return {
    model: r.model,
    cluster: { gpu, num_nodes: numNodes, gpus_per_node: gpusPerNode },
    training: { global_batch_size: r.global_batch_size, seq_len: r.seq_len, precision, stack },
    parallel: { ...r.parallel },
    options: { allow_tp_across_nodes: true },
  };
}

/** The runs a calibration was fitted on, each predicted before and after it (as ``meshplan calibrate``
 * recorded them), with this run's row marked when it is one of them (same measured step time). */
function fitTable(cal, r) {
  const runs = cal.runs || [];
  const err = (p, m) => `${p >= m ? "+" : "−"}${fmt.num(Math.abs(p / m - 1) * 100, 1)} %`;
  const mape = (x) => (x === null || x === undefined ? "not stated" : fmt.pct(x));
  return h(
    "div",
    { id: "calibration-fit" },
    h("h3", {}, `The runs it was fitted on (${cal.gpu}, ${cal.stack})`),
    h("p", { class: "sub" }, `Mean error on them: ${mape(cal.in_sample_mape)} in sample, ${mape(cal.cross_validated_mape)} cross-validated (each run predicted by a fit that left it out).`),
    runs.length
      ? h(
          "div",
          { class: "table-scroll" },
          h(
            "table",
            {},
            h("thead", {}, h("tr", {}, ["Run", "Measured", "Predicted before", "error", "Predicted after", "error"].map((c, i) => h("th", { scope: "col", class: i ? "num" : null }, c)))),
            h(
              "tbody",
              {},
              runs.map((x) => {
                const mine = x.measured_step_time_s === r.measured_step_time_s;
                return h(
                  "tr",
                  { "data-this-run": mine ? "true" : null, class: mine ? "this-run" : null },
                  h("th", { scope: "row" }, x.label, mine ? h("span", { class: "badge" }, "this run") : null),
                  h("td", { class: "num" }, fmt.time(x.measured_step_time_s)),
                  h("td", { class: "num" }, fmt.time(x.predicted_before_s)),
                  h("td", { class: "num" }, err(x.predicted_before_s, x.measured_step_time_s)),
                  h("td", { class: "num" }, fmt.time(x.predicted_after_s)),
                  h("td", { class: "num" }, err(x.predicted_after_s, x.measured_step_time_s)),
                );
              }),
            ),
          ),
        )
      : empty("The calibration lists no runs."),
  );
}

/** Predicted versus measured before and after calibration: the run's configuration estimated twice by
 * POST /v1/estimates, once with the built-in constants and once with a stored calibration
 * (``calibration_id``): the same request, so the difference is the calibration's. */
function calibrationBlock(r, calibrations, gpus, stacks) {
  if (!calibrations.length) {
    return empty("No calibrations stored yet: fit one on your runs with meshplan calibrate --runs r1.json r2.json --out cal.json and upload it with POST /v1/calibrations.");
  }
  const catalogGpu = (id) => gpus.some((g) => g.id === id);
  const sel = (id, options, value) => h("select", { id }, options.map(([v, text]) => h("option", { value: v, selected: v === value ? true : null }, text)));
  const calSel = sel("cal-pick", calibrations.map((c) => [c.id, calibrationLabel(c)]), calibrations[0].id);
  const firstGpu = catalogGpu(r.predicted_on) ? r.predicted_on : catalogGpu(calibrations[0].gpu) ? calibrations[0].gpu : gpus[0] && gpus[0].id;
  const gpuSel = sel("cal-gpu", gpus.map((g) => [g.id, g.id]), firstGpu);
  const stackOf = (c) => (stacks.some((x) => x.id === c.stack) ? c.stack : "meshplan");
  const stackSel = sel("cal-stack", stacks.map((x) => [x.id, x.id]), stackOf(calibrations[0]));
  const precisionSel = sel("cal-precision", [["bf16", "bf16"], ["fp16", "fp16"], ["fp32", "fp32"]], "bf16");
  const perNode = r.world_size <= 8 ? r.world_size : 8;
  const nodes = h("input", { id: "cal-nodes", type: "number", min: 1, value: r.world_size % perNode ? 1 : r.world_size / perNode });
  const gpn = h("input", { id: "cal-gpn", type: "number", min: 1, max: 64, value: r.world_size % perNode ? r.world_size : perNode });
  calSel.addEventListener("change", () => {
    const c = calibrations.find((x) => x.id === calSel.value);
    if (c) stackSel.value = stackOf(c);
  });
  const out = h("div", { id: "calibration-result", "aria-live": "polite" });
  const fieldOf = (id, label, control) => h("div", { class: "field" }, h("label", { for: id }, label), control);
  const form = h(
    "form",
    { id: "calibrate-form", class: "plan-form" },
    h("div", { class: "row" }, fieldOf("cal-pick", "Calibration", calSel)),
    h("div", { class: "row" }, fieldOf("cal-gpu", "Price for GPU", gpuSel), fieldOf("cal-nodes", "Nodes", nodes), fieldOf("cal-gpn", "GPUs per node", gpn), fieldOf("cal-stack", "Training stack", stackSel), fieldOf("cal-precision", "Precision", precisionSel)),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "calibrate-submit" }, "Re-price this run")),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const cal = calibrations.find((x) => x.id === calSel.value);
    const gpu = gpuSel.value;
    const request = runRequest(r, { gpu, numNodes: Number(nodes.value), gpusPerNode: Number(gpn.value), precision: precisionSel.value, stack: stackSel.value });
    put(out, loading("Estimating before and after calibration"));
    let before, after, fitted;
    try {
      [before, after, fitted] = await Promise.all([
        api("/v1/estimates", { method: "POST", body: request }),
        api("/v1/estimates", { method: "POST", body: { ...request, calibration_id: cal.id } }),
        api(`/v1/calibrations/${encodeURIComponent(cal.id)}`),
      ]);
    } catch (err) {
      put(out, errorBox(err, "The run could not be re-priced"));
      return;
    }
    const comparable = sameHardware(r.device, gpu);
    const ratio = (t) => (comparable && t ? ratioText(t / r.measured_step_time_s) : "—");
    const rows = [
      ["measured", `Measured on ${r.device}`, r.measured_step_time_s, "1.00"],
      r.predicted_step_time_s ? ["plan", `The plan's prediction for ${r.predicted_on || "its GPU"} (as the report carries it)`, r.predicted_step_time_s, sameHardware(r.device, r.predicted_on) ? ratioText(r.predicted_step_time_s / r.measured_step_time_s) : "—"] : null,
      ["before", `Before calibration: this configuration on ${gpu}, built-in constants`, before.estimate.step_time_s, ratio(before.estimate.step_time_s)],
      ["after", `After calibration with ${cal.id}: the same request with calibration_id`, after.estimate.step_time_s, ratio(after.estimate.step_time_s)],
    ].filter(Boolean);
    const chart = barChart({
      title: comparable ? `Step time: measured vs. predicted for ${gpu}, before and after calibration` : `Step time predicted for ${gpu}, before and after calibration`,
      categories: comparable ? ["measured", "before", "after"] : ["before", "after"],
      desc: comparable ? "The run's measured step time beside its configuration estimated with the built-in constants and with the calibration." : `The run was on ${r.device}, not ${gpu}: the estimates are not drawn against its measurement.`,
      series: [{ name: "step time", color: "#0072B2", values: (comparable ? [r.measured_step_time_s, before.estimate.step_time_s, after.estimate.step_time_s] : [before.estimate.step_time_s, after.estimate.step_time_s]).map((t) => t * 1000) }],
      unit: "ms",
      yLabel: "step time (ms)",
      format: (v) => `${fmt.num(v, 2)} ms`,
    });
    put(
      out,
      h(
        "div",
        { class: "table-scroll" },
        h(
          "table",
          { id: "calibration-table" },
          h("thead", {}, h("tr", {}, ["", "Step time", "Predicted ÷ measured (same hardware only)"].map((c, i) => h("th", { scope: "col", class: i ? "num" : null }, c)))),
          h("tbody", {}, rows.map(([key, label, t, q]) => h("tr", { "data-row": key }, h("th", { scope: "row" }, label), h("td", { class: "num", "data-seconds": String(t) }, fmt.time(t)), h("td", { class: "num" }, q)))),
        ),
      ),
      chart,
      comparable ? null : h("p", { class: "note", id: "calibration-not-comparable" }, r.device === "cpu" ? `This run was on the CPU: its own prediction above was priced with the layer profile and network fit measured at the run, which the report does not carry; the estimates here are for ${gpu} and are not set against the CPU measurement.` : `This run was on ${r.device}, not ${gpu}: the estimates are not set against its measurement.`),
      cal.gpu !== gpu ? h("p", { class: "note" }, `The calibration was fitted on ${cal.gpu}; the estimates are for ${gpu}.`) : null,
      fitTable(fitted, r),
    );
  });
  return h("div", {}, h("p", { class: "sub" }, "The run's configuration estimated with the built-in constants and with a stored calibration (POST /v1/estimates with calibration_id): the same request both times, so the difference is the calibration's."), form, out);
}

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
  const [stored, calibrations, gpus, stacks] = await Promise.all([
    api(`/v1/runs/${encodeURIComponent(id)}`),
    api("/v1/calibrations", { query: { limit: 100 } }).then((p) => p.items).catch(() => []),
    api("/v1/catalog/gpus").catch(() => []),
    api("/v1/catalog/stacks").catch(() => [{ id: "meshplan" }]),
  ]);
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
    section("run-calibration", "Predicted vs. measured, before and after calibration", calibrationBlock(r, calibrations, gpus, stacks)),
    r.notes.length ? section("run-notes", "Notes", h("ul", {}, r.notes.map((n) => h("li", {}, n)))) : null,
  );
}
