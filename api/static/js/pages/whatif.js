// What-if: change one setting of a plan and compare, either by evaluating exactly that configuration
// (POST /v1/estimates) or by re-planning with the setting pinned (POST /v1/plans).

import { api } from "../api.js";
import { put, errorBox, fmt, h, loading } from "../dom.js";
import { commSeconds, describe, memoryChart, timeChart } from "./plan-parts.js";

/** The schedules the planner prices (GET /v1/catalog/schedules), fetched once: what-ifs go to the planner. */
let pricedCatalog = null;
const pricedSchedules = () => (pricedCatalog ||= api("/v1/catalog/schedules").then((all) => all.filter((s) => s.priced)));

export const KNOBS = {
  tp: { label: "tensor parallel (tp)", number: true },
  pp: { label: "pipeline parallel (pp)", number: true },
  cp: { label: "context parallel (cp)", number: true },
  ep: { label: "expert parallel (ep)", number: true, moe: true },
  micro_batch_size: { label: "micro-batch size", number: true },
  schedule: { label: "pipeline schedule", fromCatalog: true },
  recompute: { label: "recompute", options: ["none", "selective", "full", "layernorm+moe_act"] },
  zero_stage: { label: "ZeRO stage", options: [0, 1, 2, 3], number: true },
};

/** The complete configuration with one setting changed and the settings it forces adjusted
 * (``schedules``: entries of GET /v1/catalog/schedules, for the virtual stages a schedule needs). */
export function changedConfig(par, knob, value, schedules = []) {
  const out = { ...par, [knob]: value };
  const cp = (p) => p.cp || 1;
  const gpus = par.tp * par.pp * par.dp * cp(par);
  if (knob === "tp" || knob === "pp" || knob === "cp") {
    const others = out.tp * out.pp * cp(out);
    const dp = gpus / others;
    if (!Number.isInteger(dp) || dp < 1) {
      const names = cp(out) > 1 || knob === "cp" ? "tp × pp × cp" : "tp × pp";
      throw { field: `parallel.${knob}`, message: `${names} = ${others} does not divide the ${gpus} GPUs this plan uses; choose a divisor of ${gpus / (others / out[knob])}` };
    }
    out.dp = dp;
  }
  if (knob === "tp" && out.tp === 1) out.sequence_parallel = false;
  if (knob === "schedule") {
    const info = schedules.find((s) => s.id === value);
    if (!info) throw { field: "parallel.schedule", message: `schedule ${value} is not in the catalog; choose one of ${schedules.map((s) => s.id).join(", ")}` };
    out.virtual_stages = info.needs_virtual_stages ? info.fixed_virtual_stages || Math.max(2, par.virtual_stages) : 1;
  }
  if (knob === "pp" || knob === "schedule") delete out.stage_layers; // the server's default (even) cut
  return out;
}

function extras(req) {
  const out = {};
  for (const k of ["profile", "profile_id", "network", "calibration", "calibration_id", "options"]) if (req[k] !== undefined && req[k] !== null) out[k] = req[k];
  return out;
}

function compareTable(cur, next, curLabel, nextLabel) {
  const rows = [
    ["Configuration", (p) => describe(p.parallel)],
    ["Layers per stage", (p) => p.parallel.stage_layers.join(", ")],
    ["Step time", (p) => p.estimate.step_time_s, fmt.time, true],
    ["Tokens/s", (p) => p.estimate.tokens_per_s, (v) => fmt.si(v), false],
    ["MFU", (p) => p.estimate.mfu, (v) => fmt.pct(v), false],
    ["Peak memory", (p) => p.estimate.peak_memory_gib, fmt.gib, true],
    ["Fits in memory", (p) => (p.estimate.fits ? "yes" : "NO")],
    ["Pipeline bubble", (p) => p.estimate.breakdown.pp_bubble_s, fmt.time, true],
    ["Communication", (p) => commSeconds(p.estimate.breakdown), fmt.time, true],
  ];
  return h("div", { class: "table-scroll" }, h(
    "table",
    { class: "compare whatif-table" },
    h("caption", {}, "Change: relative difference of the what-if against the current plan (better or worse as labelled)."),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), h("th", { scope: "col" }, curLabel), h("th", { scope: "col" }, nextLabel), h("th", { scope: "col" }, "Change"))),
    h(
      "tbody",
      {},
      rows.map(([label, get, f, lowerIsBetter]) => {
        const a = get(cur);
        const b = get(next);
        let change = "";
        if (f && typeof a === "number" && a !== 0) {
          const d = b / a - 1;
          const better = lowerIsBetter ? d < 0 : d > 0;
          change = Math.abs(d) < 5e-4 ? "same" : `${d > 0 ? "+" : ""}${fmt.pct(d)} (${better ? "better" : "worse"})`;
        }
        return h("tr", {}, h("th", { scope: "row" }, label), h("td", {}, f ? f(a) : String(a)), h("td", {}, f ? f(b) : String(b)), h("td", {}, change));
      }),
    ),
  ));
}

export function whatIf(stored, plan, index) {
  const req = stored.request;
  const knobs = Object.entries(KNOBS).filter(([, v]) => !v.moe || plan.model.moe); // ep: mixtures of experts only
  const knobSel = h("select", { id: "whatif-knob" }, knobs.map(([k, v]) => h("option", { value: k }, v.label)));
  const valueHolder = h("div", { class: "field" });
  const valueError = h("p", { class: "field-error", id: "whatif-value-err", hidden: true });
  const result = h("div", { class: "whatif-result", "aria-live": "polite" });
  let valueEl;
  let schedules = [];
  const renderValue = () => {
    const k = knobSel.value;
    const knob = KNOBS[k];
    const cur = k === "cp" || k === "ep" ? plan.parallel[k] || 1 : plan.parallel[k];
    const options = knob.fromCatalog ? schedules.map((s) => s.id) : knob.options;
    valueEl = options
      ? h("select", { id: "whatif-value" }, options.map((o) => h("option", { value: o, selected: String(o) === String(cur) || null }, `${o}${String(o) === String(cur) ? " (current)" : ""}`)))
      : h("input", { id: "whatif-value", type: "number", min: 1, value: k === "micro_batch_size" || k === "cp" ? cur * 2 : cur, required: true });
    valueEl.setAttribute("aria-describedby", "whatif-value-err");
    valueEl.dataset.field = `parallel.${k}`;
    clearValueError();
    put(valueHolder, h("label", { for: "whatif-value" }, `New value (now ${cur})`), valueEl, valueError);
  };
  function clearValueError() {
    valueError.hidden = true;
    valueError.textContent = "";
    if (valueEl) valueEl.removeAttribute("aria-invalid");
  }
  /** A problem naming the changed setting (e.g. parallel.cp) is shown under its value field too. */
  function showValueError(err, k) {
    const mine = ((err && err.errors) || []).filter((e) => e.field === `parallel.${k}`);
    if (!mine.length) return;
    valueEl.setAttribute("aria-invalid", "true");
    valueError.hidden = false;
    valueError.textContent = mine.map((e) => `${e.message}${e.fix ? ` — ${e.fix}` : ""}`).join(" · ");
  }
  knobSel.addEventListener("change", renderValue);
  renderValue();
  pricedSchedules()
    .then((s) => {
      schedules = s;
      if (KNOBS[knobSel.value].fromCatalog) renderValue();
    })
    .catch(() => {});
  const mode = (value, text, checked) => h("label", {}, h("input", { type: "radio", name: "whatif-mode", value, checked: checked || null }), ` ${text}`);
  const form = h(
    "form",
    { class: "whatif-form" },
    h("div", { class: "row" }, h("div", { class: "field" }, h("label", { for: "whatif-knob" }, "Change"), knobSel), valueHolder),
    h("fieldset", {}, h("legend", {}, "How"), mode("estimate", "Evaluate exactly this configuration with the one change", true), mode("replan", "Re-plan with this setting pinned (the solver adjusts the rest)")),
    h("button", { type: "submit", class: "primary" }, "Compare"),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const k = knobSel.value;
    const value = KNOBS[k].number ? Number(valueEl.value) : valueEl.value;
    const how = form.elements["whatif-mode"].value;
    const nextLabel = `${k} = ${value}`;
    clearValueError();
    put(result, loading(how === "estimate" ? "Estimating" : "Re-planning"));
    try {
      let next;
      let link = null;
      if (how === "estimate") {
        const body = { model: req.model, cluster: req.cluster, training: req.training, parallel: changedConfig(plan.parallel, k, value, schedules), top_k: 1, ...extras(req) };
        next = await api("/v1/estimates", { method: "POST", body });
      } else {
        const body = { ...req, parallel: { ...(req.parallel || {}), [k]: value } };
        const out = await api("/v1/plans", { method: "POST", body });
        if (!out.response.plans.length) {
          const inf = out.response.infeasible;
          throw { title: "No configuration fits with that pin", detail: inf ? `${inf.reason} — ${inf.suggestion}` : out.response.solver.status };
        }
        next = out.response.plans[0];
        link = h("p", {}, "The re-planned result is stored as ", h("a", { href: `#/plans/${encodeURIComponent(out.id)}` }, `plan ${out.id}`), ".");
      }
      const curLabel = index === 0 ? "Current (#1, chosen)" : `Current (#${index + 1})`;
      put(result, 
        h("h3", {}, `${curLabel} vs. ${nextLabel}`),
        compareTable(plan, next, curLabel, `What if ${nextLabel}`),
        link,
        h("div", { class: "side-by-side" }, memoryChart(plan, `Memory per GPU — current`), memoryChart(next, `Memory per GPU — ${nextLabel}`)),
        timeChart([plan, next], ["current", nextLabel], "Step time, current vs. what-if"),
      );
    } catch (err) {
      const problem = err.field ? { title: "Cannot make that change", errors: [err] } : err;
      showValueError(problem, k);
      put(result, errorBox(problem, "The what-if was not accepted"));
    }
  });
  return h("div", {}, h("p", { class: "sub" }, "Change one setting and compare against this configuration side by side."), form, result);
}
