// Open a plan file: a Plan JSON (the dashboard's "Download plan JSON", `meshplan plan --out`, or one written
// by hand, e.g. runtime.testing.make_plan(..., cp=2)) drawn in the browser — configuration, device mesh
// (with the cp axis when cp > 1), memory and time. Nothing is sent to the server.

import { errorBox, fmt, h, put, section, setTitle } from "../dom.js";
import { describe, memoryChart, meshFigure, precisionText, timeChart } from "./plan-parts.js";

/** The fields of a Plan this page draws from; → the first one missing, or null. */
export function missingPlanField(plan) {
  if (!plan || typeof plan !== "object" || Array.isArray(plan)) return "plan";
  for (const path of ["cluster.num_nodes", "cluster.gpus_per_node", "parallel.tp", "parallel.pp", "parallel.dp", "mesh.dim_names", "mesh.shape", "estimate.breakdown", "estimate.memory_per_stage"]) {
    let node = plan;
    for (const key of path.split(".")) node = node && typeof node === "object" ? node[key] : undefined;
    if (node === undefined || node === null) return path;
  }
  return null;
}

function draw(out, plan) {
  const missing = missingPlanField(plan);
  if (missing) {
    put(out, errorBox({ title: "Not a plan", errors: [{ field: missing, message: "missing; open a Plan JSON (from “Download plan JSON” or meshplan plan --out)" }] }));
    return;
  }
  const t = plan.training || {};
  const m = plan.model || {};
  const c = plan.cluster;
  const e = plan.estimate;
  put(
    out,
    section(
      "opened",
      `${m.name || "model"} on ${c.num_nodes} × ${c.gpus_per_node} ${typeof c.gpu === "string" ? c.gpu : (c.gpu && c.gpu.id) || "GPU"}`,
      h("p", { class: "config-line" }, describe(plan.parallel)),
      h("p", { class: "sub" }, [t.precision ? precisionText(t) : null, t.global_batch_size ? `global batch ${fmt.num(t.global_batch_size)} × ${fmt.num(t.seq_len)} tokens` : null, `mesh ${plan.mesh.dim_names.map((d, i) => `${d} ${plan.mesh.shape[i]}`).join(" × ")}`].filter(Boolean).join(" · ")),
      e.step_time_s ? null : h("p", { class: "note" }, "This plan carries no prediction (an all-zero estimate): its memory and time charts are empty."),
    ),
    section("mesh", "Device mesh", meshFigure(plan)),
    section("memory", "Memory per GPU", memoryChart(plan)),
    section("time", "Where the step time goes", timeChart([plan], ["this plan"])),
  );
}

export async function openPlanPage(root) {
  setTitle("Open a plan file");
  const text = h("textarea", { id: "open-plan-json", rows: 10, spellcheck: "false", class: "code", placeholder: '{"parallel": {...}, "mesh": {...}, ...}', "aria-describedby": "open-plan-json-err" });
  const file = h("input", { type: "file", id: "open-plan-file", accept: ".json,application/json" });
  const err = h("p", { class: "field-error", id: "open-plan-json-err", hidden: true });
  const out = h("div", { class: "opened-plan" });
  const show = () => {
    err.hidden = true;
    text.removeAttribute("aria-invalid");
    let plan;
    try {
      plan = JSON.parse(text.value);
    } catch (e) {
      err.hidden = false;
      err.textContent = `not valid JSON (${e.message})`;
      text.setAttribute("aria-invalid", "true");
      put(out);
      return;
    }
    draw(out, plan);
  };
  file.addEventListener("change", async () => {
    if (!file.files || !file.files[0]) return;
    text.value = await file.files[0].text();
    show();
  });
  const form = h(
    "form",
    { class: "plan-form", onsubmit: (e) => { e.preventDefault(); show(); } },
    h("div", { class: "field" }, h("label", { for: "open-plan-json" }, "Plan JSON"), text, err),
    h("div", { class: "field" }, h("label", { for: "open-plan-file" }, "Or upload a plan file"), file),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "open-plan-submit" }, "Draw the plan")),
  );
  put(root, h("h1", {}, "Open a plan file"), h("p", { class: "lead" }, "Draw a plan file — the plan page's “Download plan JSON”, ", h("code", {}, "meshplan plan --out"), ", or one written by hand — without storing it: its configuration, device mesh (with the context-parallel axis when cp > 1), memory and time. The file stays in this browser."), form, out);
}
