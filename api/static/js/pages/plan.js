// Plan detail: the chosen configuration and why, its alternatives side by side, the device mesh,
// memory per stage, the time breakdown, the simulated pipeline schedule, exports and a what-if.

import { api, download, url } from "../api.js";
import { announce, empty, errorBox, fmt, gpuId, h, loading, put, section, setTitle } from "../dom.js";
import { commSeconds, describe, memoryChart, meshFigure, precisionText, timeChart, traceTimeline } from "./plan-parts.js";
import { whatIf } from "./whatif.js";

const CONSTRAINT_TEXT = {
  memory: "memory: a faster configuration would not fit in GPU memory",
  bubble: "the pipeline bubble: idle time while the pipeline fills and drains",
  communication: "communication: time spent in collectives and transfers",
  compute: "compute: the GPUs are busy with the model's arithmetic",
};

function stat(label, value, sub) {
  return h("div", { class: "stat" }, h("dt", {}, label), h("dd", {}, value, sub ? h("span", { class: "sub" }, sub) : null));
}

function altLabel(i) {
  return i === 0 ? "#1 (chosen)" : `#${i + 1}`;
}

function headline(plan, training) {
  const e = plan.estimate;
  const p = plan.parallel;
  return h(
    "dl",
    { class: "stats" },
    stat("Step time", fmt.time(e.step_time_s), `${e.num_microbatches} micro-batches`),
    stat("Throughput", `${fmt.si(e.tokens_per_s)} tokens/s`, `${fmt.num(e.model_tflops_per_gpu, 0)} TFLOP/s per GPU`),
    stat("MFU", fmt.pct(e.mfu), "model FLOPs ÷ peak"),
    stat("Peak memory", fmt.gib(e.peak_memory_gib), `of ${fmt.gib(e.gpu_memory_gib)} (${fmt.pct(e.peak_memory_gib / e.gpu_memory_gib, 0)})${e.fits ? "" : " — does NOT fit"}`),
    stat(
      "Parallelism",
      `TP ${p.tp} × PP ${p.pp} × DP ${p.dp}${p.cp > 1 ? ` × CP ${p.cp}` : ""}`,
      `${e.gpus_used} GPUs${p.cp > 1 ? ` · CP exchange ${p.cp_comm}` : ""}${(p.ep || 1) > 1 || (p.etp || 1) > 1 ? ` · experts: EP ${p.ep} × ETP ${p.etp || 1} × expert-DP ${(p.tp * (p.cp || 1) * p.dp) / ((p.ep || 1) * (p.etp || 1))}` : ""}`,
    ),
    stat("Pipeline", p.virtual_stages > 1 ? `${p.schedule} ×${p.virtual_stages}` : p.schedule, `micro-batch ${p.micro_batch_size}`),
    stat("Precision", precisionText(training), training.precision === "fp8" ? "FP8 GEMMs in the blocks' linears" : "weights and activations"),
    stat("Memory savers", `recompute ${p.recompute}`, `ZeRO ${p.zero_stage}${p.sequence_parallel ? " · sequence parallel" : ""}`),
  );
}

function why(resp, plans) {
  const best = plans[0];
  const ex = best.explanation;
  const e = best.estimate;
  const b = e.breakdown;
  const facts = [
    `The step takes ${fmt.time(e.step_time_s)}: compute ${fmt.pct(b.compute_s / e.step_time_s)}, pipeline bubble ${fmt.pct(b.pp_bubble_s / e.step_time_s)}, communication ${fmt.pct(commSeconds(b) / e.step_time_s)}, optimizer ${fmt.pct(b.optimizer_s / e.step_time_s)}.`,
    `The fullest GPU holds ${fmt.gib(e.peak_memory_gib)} of ${fmt.gib(e.gpu_memory_gib)} (${fmt.pct(e.peak_memory_gib / e.gpu_memory_gib, 0)})` +
      (e.memory_headroom ? `; plans keep ${fmt.pct(e.memory_headroom, 0)} free (usable ${fmt.gib(e.usable_memory_gib)}).` : "."),
  ];
  if (plans[1]) {
    const d = plans[1].estimate.step_time_s / e.step_time_s - 1;
    facts.push(`The runner-up (${describe(plans[1].parallel)}) is ${fmt.pct(d)} slower per step.`);
  }
  const solver = resp.solver;
  return h(
    "div",
    { class: "why" },
    ex
      ? h(
          "div",
          {},
          h("p", { class: "summary" }, ex.summary),
          h("p", {}, h("strong", {}, "Binding constraint: "), h("span", { class: `badge constraint-${ex.binding_constraint}` }, ex.binding_constraint), " — ", CONSTRAINT_TEXT[ex.binding_constraint] || ""),
          ex.runner_up ? h("p", {}, h("strong", {}, "Why the runner-up lost: "), ex.runner_up) : null,
          ex.details && ex.details.length ? h("ul", {}, ex.details.map((d) => h("li", {}, d))) : null,
        )
      : h("p", { class: "note" }, "The planner gave no written explanation for this plan; the figures below show where time and memory go."),
    h("h3", {}, "In numbers"),
    h("ul", {}, facts.map((f) => h("li", {}, f))),
    h(
      "p",
      { class: "note" },
      `Solver: ${solver.status}${solver.status === "OPTIMAL" ? " (proven best under the cost model)" : ""}, ${fmt.num(solver.configurations_considered)} configurations considered in ${fmt.time(solver.wall_time_s)}.`,
    ),
    [...(e.notes || []), ...(solver.notes || [])].length ? h("ul", { class: "notes" }, [...(e.notes || []), ...(solver.notes || [])].map((n) => h("li", {}, n))) : null,
  );
}

function alternativesTable(plans) {
  const best = plans[0];
  const rows = [
    ["Tensor parallel (tp)", (p) => p.parallel.tp],
    ["Pipeline parallel (pp)", (p) => p.parallel.pp],
    ["Data parallel (dp)", (p) => p.parallel.dp],
    ...(plans.some((p) => p.parallel.cp > 1) ? [["Context parallel (cp)", (p) => (p.parallel.cp > 1 ? `${p.parallel.cp} (${p.parallel.cp_comm})` : 1)]] : []),
    ["Micro-batch size", (p) => p.parallel.micro_batch_size],
    ["Micro-batches per step", (p) => p.estimate.num_microbatches],
    ["Schedule", (p) => (p.parallel.virtual_stages > 1 ? `${p.parallel.schedule} ×${p.parallel.virtual_stages}` : p.parallel.schedule)],
    ["Recompute", (p) => p.parallel.recompute],
    ["Sequence parallel", (p) => fmt.bool(p.parallel.sequence_parallel)],
    ["ZeRO stage", (p) => p.parallel.zero_stage],
    ["Layers per stage", (p) => p.parallel.stage_layers.join(", ")],
    ["Step time", (p) => fmt.time(p.estimate.step_time_s), true],
    ["vs. chosen", (p) => (p === best ? "—" : `${p.estimate.step_time_s >= best.estimate.step_time_s ? "+" : ""}${fmt.pct(p.estimate.step_time_s / best.estimate.step_time_s - 1)}`), true],
    ["Tokens/s", (p) => fmt.si(p.estimate.tokens_per_s), true],
    ["MFU", (p) => fmt.pct(p.estimate.mfu), true],
    ["TFLOP/s per GPU", (p) => fmt.num(p.estimate.model_tflops_per_gpu, 0), true],
    ["Peak memory", (p) => `${fmt.gib(p.estimate.peak_memory_gib)} / ${fmt.gib(p.estimate.gpu_memory_gib)}`, true],
    ["Fits", (p) => (p.estimate.fits ? "yes" : "NO"), true],
    ["Bubble", (p) => fmt.pct(p.estimate.breakdown.pp_bubble_s / p.estimate.step_time_s), true],
  ];
  return h(
    "div",
    { class: "table-scroll" },
    h(
      "table",
      { class: "compare", id: "alternatives-table" },
      h("caption", {}, "Settings that differ from the chosen plan are in bold and marked ≠."),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), plans.map((p, i) => h("th", { scope: "col", class: i === 0 ? "chosen" : null }, altLabel(i))))),
      h(
        "tbody",
        {},
        rows.map(([label, get, metric]) =>
          h(
            "tr",
            { class: metric ? "metric" : null },
            h("th", { scope: "row" }, label),
            plans.map((p, i) => {
              const v = String(get(p));
              const differs = !metric && i > 0 && v !== String(get(best));
              return h("td", { class: [differs ? "diff" : "", i === 0 ? "chosen" : ""].join(" ").trim() || null }, differs ? h("span", { class: "visually-hidden" }, "differs: ") : null, v, differs ? h("span", { class: "diff-mark", "aria-hidden": "true" }, " ≠") : null);
            }),
          ),
        ),
      ),
    ),
  );
}

/** The preset id of a training stack as a request or plan names it (an inline stack's base). */
export function stackId(stack) {
  if (!stack) return "meshplan";
  return typeof stack === "string" ? stack : stack.base || "meshplan";
}

/** What a plan was priced with: its training stack and, when given, the calibration. */
function pricedWith(request, training) {
  const stack = training.stack;
  const inline = stack && typeof stack === "object";
  const cal = request.calibration_id || (request.calibration && (request.calibration.id || "inline"));
  return h(
    "p",
    { class: "sub", id: "priced-for" },
    "Priced for the training stack ",
    h("strong", { "data-stack": stackId(stack) }, stackId(stack)),
    inline ? ` with overrides ${JSON.stringify(Object.fromEntries(Object.entries(stack).filter(([k]) => k !== "base")))}` : "",
    cal ? [" · calibrated with ", request.calibration_id ? h("code", { "data-calibration": request.calibration_id }, request.calibration_id) : "an inline calibration", request.calibration ? ` (${request.calibration.gpu}, ${request.calibration.stack})` : ""] : " · built-in constants (no calibration)",
    ".",
  );
}

function exportsBlock(id, index, plan, formats) {
  const out = h("div", { class: "exports" });
  const planStack = stackId(plan.training.stack);
  const msg = h("div", { role: "status", "aria-live": "polite" });
  const opts = {};
  const optFields = [
    ["job_name", "Job name", "text"],
    ["image", "Container image", "text"],
    ["namespace", "Kubernetes namespace", "text"],
    ["partition", "Slurm partition", "text"],
    ["nodes", "Nodes", "number"],
  ];
  const links = [];
  const hrefFor = (fmtId) => url(`/v1/plans/${encodeURIComponent(id)}/export/${encodeURIComponent(fmtId)}`, { index, ...opts });
  const refresh = () => links.forEach(([a, f]) => a.setAttribute("href", hrefFor(f)));
  const getFile = async (e, href, name) => {
    e.preventDefault();
    put(msg, loading("Downloading"));
    try {
      let warning = null;
      const saved = await download(href, name, (res) => (warning = res.headers.get("X-Meshplan-Stack-Warning")));
      put(msg, h("p", { class: "note" }, `Downloaded ${saved}.`), warning ? h("p", { class: "state state-warning stack-warning", role: "alert" }, `Warning: ${warning}`) : null);
    } catch (err) {
      put(msg, errorBox(err, "The export failed"));
    }
  };
  const list = h("ul", { class: "export-list" });
  for (const f of formats) {
    const a = h("a", { href: hrefFor(f.id), class: "button secondary", "data-format": f.id }, `Download ${f.id}`);
    a.addEventListener("click", (e) => getFile(e, a.getAttribute("href"), `${id}.${f.id}`));
    links.push([a, f.id]);
    const other = f.stack && f.stack !== planStack;
    list.append(
      h(
        "li",
        {},
        a,
        h("span", { class: "sub" }, ` ${f.target}${f.target_version ? " " + f.target_version : ""} · ${f.media_type}${f.stack ? ` · runs ${f.stack}` : ""}`),
        other ? h("span", { class: "stack-warning", "data-format-warning": f.id }, ` ⚠ This plan was priced for ${planStack}, not ${f.stack}: its figures assume another stack — re-plan with the training stack ${f.stack} before running it there.`) : null,
      ),
    );
  }
  const traceHref = url(`/v1/plans/${encodeURIComponent(id)}/trace`, { index });
  const traceA = h("a", { href: traceHref, class: "button secondary", "data-format": "trace" }, "Download trace JSON");
  traceA.addEventListener("click", (e) => getFile(e, traceHref, `${id}-trace.json`));
  const planA = h("a", { href: "#", class: "button secondary" }, "Download plan JSON");
  planA.addEventListener("click", (e) => {
    e.preventDefault();
    const blob = new Blob([JSON.stringify(plan, null, 2)], { type: "application/json" });
    const a = h("a", { href: URL.createObjectURL(blob), download: `${id}-plan-${index + 1}.json` });
    document.body.append(a);
    a.click();
    a.remove();
  });
  out.append(
    formats.length ? list : empty("This server lists no export formats."),
    h("details", {}, h("summary", {}, "Export options"), h("div", { class: "row" }, optFields.map(([k, label, type]) => {
      const input = h("input", { type, id: `exp-${k}`, min: type === "number" ? 1 : null });
      input.addEventListener("input", () => {
        if (input.value.trim()) opts[k] = input.value.trim();
        else delete opts[k];
        refresh();
      });
      return h("div", { class: "field" }, h("label", { for: `exp-${k}` }, label), input);
    }))),
    h(
      "ul",
      { class: "export-list" },
      h("li", {}, traceA, h("span", { class: "sub" }, " Chrome/Perfetto trace of the simulated schedule: open ", h("a", { href: "https://ui.perfetto.dev", rel: "noopener", target: "_blank" }, "ui.perfetto.dev"), " and choose “Open trace file” (the file never leaves your machine).")),
      h("li", {}, planA, h("span", { class: "sub" }, " The plan itself, for ", h("code", {}, "meshplan run --plan plan.json"), " and ", h("code", {}, "meshplan export"), ".")),
    ),
    msg,
  );
  return out;
}

async function scheduleFigure(holder, id, index, isCurrent) {
  put(holder, loading("Simulating the schedule"));
  try {
    const trace = await api(`/v1/plans/${encodeURIComponent(id)}/trace`, { query: { index } });
    if (!isCurrent()) return;
    const fig = traceTimeline(trace, "Simulated pipeline schedule (one row per pipeline stage)");
    put(holder, fig || empty("The trace has no compute blocks."));
  } catch (err) {
    put(holder, errorBox(err, "Could not load the schedule trace"));
  }
}

/** The mark of an answer made by an older cost model, with the one-click re-plan: POST the stored
 * request again (its id now includes the current cost-model version, so it is solved, not served). */
function staleNotice(stored) {
  const status = h("span", { role: "status", "aria-live": "polite" });
  const button = h("button", { type: "button", class: "primary", id: "replan-current" }, "Re-plan with the current cost model");
  button.addEventListener("click", async () => {
    button.disabled = true;
    put(status, loading("Re-planning"));
    try {
      const fresh = await api("/v1/plans", { method: "POST", body: stored.request });
      announce("Plan ready");
      location.hash = `#/plans/${encodeURIComponent(fresh.id)}`;
    } catch (err) {
      button.disabled = false;
      put(status, errorBox(err, "Re-planning failed"));
    }
  });
  const made = stored.cost_model_version ? `cost model version ${stored.cost_model_version}` : "a cost model from before versioning";
  return h(
    "div",
    { class: "state state-stale", id: "stale-notice", role: "note" },
    h("p", {}, h("span", { class: "badge stale" }, "older cost model"), ` This plan was made by ${made}; the planner has changed since, so its figures, trace and ranking may differ from a plan made now.`),
    h("p", {}, button, " ", status),
  );
}

function infeasibleView(resp) {
  const inf = resp.infeasible;
  return h(
    "div",
    { class: "state state-error", role: "alert" },
    h("p", { class: "error-title" }, "No configuration fits"),
    inf ? h("p", {}, inf.reason) : h("p", {}, `The solver ended with status ${resp.solver.status}.`),
    inf ? h("p", {}, h("strong", {}, "What to change: "), h("code", {}, inf.field), " — ", inf.suggestion) : null,
    inf && inf.min_memory_per_gpu_gib ? h("p", {}, `Even the leanest configuration needs about ${fmt.gib(inf.min_memory_per_gpu_gib)} per GPU.`) : null,
  );
}

export async function planPage(root, { arg: id, query, isCurrent }) {
  setTitle(`Plan ${id}`);
  root.append(h("h1", {}, "Plan"), loading("Loading the plan"));
  const [stored, formats] = await Promise.all([api(`/v1/plans/${encodeURIComponent(id)}`), api("/v1/catalog/export-formats").catch(() => [])]);
  const resp = stored.response;
  const plans = resp.plans || [];
  const m = resp.model;
  const c = resp.cluster;
  const t = resp.training;
  setTitle(`${m.name} on ${c.num_nodes * c.gpus_per_node} × ${gpuId(c)}`);
  const title = h(
    "div",
    { class: "page-head" },
    h("div", {}, h("h1", {}, `${m.name} on ${c.num_nodes} × ${c.gpus_per_node} ${gpuId(c)}`), h("p", { class: "sub" }, `global batch ${fmt.num(t.global_batch_size)} × ${fmt.num(t.seq_len)} tokens · ${precisionText(t)} · ${t.optimizer} · plan ${stored.id} · ${fmt.date(stored.created_at)}`), pricedWith(stored.request, t)),
    h("a", { class: "button secondary", href: `#/new?from=${encodeURIComponent(stored.id)}` }, "Edit and re-plan"),
  );
  const requestDetails = h("details", { class: "raw" }, h("summary", {}, "Request JSON"), h("pre", { class: "code" }, JSON.stringify(stored.request, null, 2)));
  const stale = stored.stale ? staleNotice(stored) : null;
  if (!plans.length) {
    put(root, title, stale, infeasibleView(resp), requestDetails);
    return;
  }
  const best = plans[0];
  let index = Math.min(Math.max(0, Number(query.get("alt") || 0) || 0), plans.length - 1);

  const toc = h(
    "nav",
    { class: "toc", "aria-label": "On this page" },
    h(
      "ul",
      {},
      [["why", "Why this plan"], ["alternatives", "Alternatives"], ["time", "Time"], ["mesh", "Mesh"], ["memory", "Memory"], ["schedule", "Schedule"], ["whatif", "What if"], ["exports", "Exports"]].map(([sid, text]) =>
        h("li", {}, h("a", { href: `#/plans/${encodeURIComponent(id)}`, onclick: (e) => { e.preventDefault(); const el = document.getElementById(sid); el.scrollIntoView(); el.setAttribute("tabindex", "-1"); el.focus({ preventScroll: true }); } }, text)),
      ),
    ),
  );

  const detail = h("div", { class: "detail" });
  const picker = h(
    "fieldset",
    { class: "alt-picker" },
    h("legend", {}, "Show mesh, memory, schedule, what-if and exports for"),
    plans.map((p, i) =>
      h("label", {}, h("input", { type: "radio", name: "alt", value: i, checked: i === index || null, onchange: () => { index = i; renderDetail(); } }), ` ${altLabel(i)}: ${fmt.time(p.estimate.step_time_s)}`),
    ),
  );

  function renderDetail() {
    const plan = plans[index];
    const label = altLabel(index);
    const sched = h("div", { class: "schedule-holder" });
    put(detail, 
      section("mesh", `Device mesh — ${label}`, h("p", { class: "sub" }, describe(plan.parallel)), meshFigure(plan)),
      section("memory", `Memory per GPU — ${label}`, h("p", {}, `Peak ${fmt.gib(plan.estimate.peak_memory_gib)} of ${fmt.gib(plan.estimate.gpu_memory_gib)}: `, plan.estimate.fits ? "fits." : h("strong", {}, "does not fit.")), memoryChart(plan)),
      section("schedule", `Simulated pipeline schedule — ${label}`, h("p", { class: "sub" }, `${plan.estimate.num_microbatches} micro-batches over ${plan.parallel.pp} stage(s) with ${plan.parallel.schedule}; hover a block for its micro-batch and timing.`), sched),
      section("whatif", `What if… — starting from ${label}`, whatIf(stored, plan, index)),
      section("exports", `Exports — ${label}`, exportsBlock(stored.id, index, plan, formats)),
    );
    scheduleFigure(sched, stored.id, index, () => isCurrent() && plans[index] === plan);
  }

  put(root, 
    title,
    stale,
    toc,
    section("chosen", "Chosen configuration", h("p", { class: "config-line" }, describe(best.parallel)), headline(best, t)),
    section("why", "Why this plan", why(resp, plans)),
    section("alternatives", `Top ${plans.length} alternatives side by side`, alternativesTable(plans)),
    section("time", "Where the step time goes", timeChart(plans, plans.map((_, i) => altLabel(i)))),
    picker,
    detail,
    h("details", { class: "raw" }, h("summary", {}, `Tensor-parallel plan (${best.tp_plan.length} rules)`), best.tp_plan.length ? h("table", {}, h("thead", {}, h("tr", {}, ["pattern", "style", "layouts"].map((x) => h("th", { scope: "col" }, x)))), h("tbody", {}, best.tp_plan.map((r) => h("tr", {}, h("td", {}, h("code", {}, r.pattern)), h("td", {}, r.style), h("td", {}, [r.input_layouts && `in ${r.input_layouts}`, r.output_layouts && `out ${r.output_layouts}`, r.desired_input_layouts && `want in ${r.desired_input_layouts}`, r.desired_output_layouts && `want out ${r.desired_output_layouts}`].filter(Boolean).join("; ")))))) : h("p", {}, "No tensor parallelism (tp = 1).")),
    requestDetails,
  );
  renderDetail();
}
