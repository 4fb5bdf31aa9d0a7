// New plan: pick a catalog model and GPU (or paste specs), size the cluster and the batch, pin what
// you must, submit, land on the plan. Validation errors appear next to the field they name.

import { api } from "../api.js";
import { announce, errorBox, fmt, h, loading, put, setTitle } from "../dom.js";

const CUSTOM = "__custom__";
/** The model picker's value for a pasted or uploaded Hugging Face config.json. */
const HF = "__hf__";
/** The value of a stack / calibration option that carries an inline object (from a plan being edited). */
const INLINE = "__inline__";

/** A picker's value: its option's value, or the inline object the option carries. */
function pickedValue(sel) {
  const opt = sel.selectedOptions[0];
  if (!opt || opt.value !== INLINE) return sel.value;
  return JSON.parse(opt.dataset.json);
}

/** Select ``value`` in ``sel``; an object (an inline stack or calibration) gets an option of its own. */
function pick(sel, value, label) {
  if (value === undefined || value === null) return;
  if (typeof value !== "object") {
    if (![...sel.options].some((o) => o.value === String(value))) sel.append(h("option", { value: String(value) }, `${value} (not stored on this server)`));
    sel.value = String(value);
    return;
  }
  for (const o of [...sel.options]) if (o.value === INLINE) o.remove();
  const opt = h("option", { value: INLINE, dataset: { json: JSON.stringify(value) } }, label(value));
  sel.append(opt);
  sel.value = INLINE;
}

/** One line per stored calibration: what it was fitted on and how well it predicts. */
export function calibrationLabel(c) {
  const err = c.cross_validated_mape !== null && c.cross_validated_mape !== undefined
    ? `cross-validated error ${fmt.pct(c.cross_validated_mape)}`
    : c.in_sample_mape !== null && c.in_sample_mape !== undefined
      ? `in-sample error ${fmt.pct(c.in_sample_mape)}`
      : "no error stated";
  return `${c.gpu} · ${c.stack} · ${c.runs} run${c.runs === 1 ? "" : "s"} · ${err} (${c.id})`;
}

/** A catalog model's line in the picker: layers, width, parameters; a mixture of experts with its experts,
 * top-k and total / active parameters (GET /v1/catalog/models counts them; paramCount for a dense model). */
export function modelLabel(m) {
  const total = m.total_parameters !== undefined ? m.total_parameters : paramCount(m);
  if (!m.moe) return `${m.name} — ${m.num_layers} layers, hidden ${m.hidden_size}, ≈${fmt.count(total)} parameters`;
  const e = m.moe;
  const shared = e.shared_experts ? ` + ${e.shared_experts} shared` : "";
  const active = m.active_parameters !== undefined ? `, ${fmt.count(m.active_parameters)} active` : "";
  return `${m.name} — MoE: ${e.num_experts} experts${shared}, top-${e.top_k}, ${m.num_layers} layers; ≈${fmt.count(total)} total${active}`;
}

/** The stack preset a stack picker's value names (an inline stack's base). */
function stackOf(stacks, value) {
  const id = !value ? "meshplan" : typeof value === "string" ? value : value.base || "meshplan";
  return stacks.find((x) => x.id === id) || null;
}

/** Options of the FP8 recipe picker for a stack (GET /v1/catalog/stacks fp8_recipes, its default first):
 * [value, text]; "" = the stack's default. A stack without FP8 offers only a note. */
export function recipeOptions(stack) {
  const recipes = (stack && stack.fp8_recipes) || [];
  if (!recipes.length) return [["", `${stack ? stack.id : "this stack"} runs no FP8 recipe`]];
  return [["", `stack default (${recipes[0]})`], ...recipes.map((r) => [r, r])];
}

/** Options of the precision picker for a stack (GET /v1/catalog/stacks precisions): [value, text]. fp8 is always
 * offered: whether the GPU and the stack run it is the server's answer, next to the field. */
export function precisionOptions(stack) {
  const precisions = (stack && stack.precisions) || ["bf16", "fp16", "fp32"];
  return [...precisions.map((p) => [p, p]), ["fp8", "fp8 (FP8 GEMMs, bf16 elsewhere)"]];
}

/** Options of the context-parallel exchange picker for a stack (cp_comms): [value, text]; "" = default. */
export function cpCommOptions(stack) {
  const comms = (stack && stack.cp_comms) || [];
  if (!comms.length) return [["", `${stack ? stack.id : "this stack"} runs no context parallelism`]];
  return [["", "default (p2p ring)"], ...comms.map((c) => [c, c])];
}

/** Parameter count of a ModelSpec: blocks (attention, MLP, two norms; biases for GPT), token
 * embedding (+ learned positions for GPT), final norm and LM head; tied weights counted once. */
export function paramCount(m) {
  const h = m.hidden_size;
  const d = h / m.num_attention_heads;
  const q = m.num_attention_heads * d;
  const kv = m.num_kv_heads * d;
  const f = m.ffn_hidden_size;
  const bias = m.family === "gpt";
  const norm = m.norm === "layernorm" ? 2 * h : h;
  const nIn = m.activation === "swiglu" ? 2 : 1;
  const attn = h * q + 2 * h * kv + q * h + (bias ? q + 2 * kv + h : 0);
  const mlp = nIn * h * f + f * h + (bias ? nIn * f + h : 0);
  const block = 2 * norm + attn + mlp;
  const embedding = m.vocab_size * h + (m.family === "gpt" ? m.max_seq_len * h : 0);
  const head = norm + m.vocab_size * h;
  return embedding + m.num_layers * block + head - (m.tie_embeddings ? m.vocab_size * h : 0);
}

function field(name, label, control, hint) {
  const id = `f-${name.replace(/\./g, "-")}`;
  control.id = id;
  control.name = name;
  control.dataset.field = name;
  const errId = `${id}-err`;
  const hintId = hint ? `${id}-hint` : null;
  control.setAttribute("aria-describedby", [hintId, errId].filter(Boolean).join(" "));
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    control,
    hint ? h("p", { class: "hint", id: hintId }, hint) : null,
    h("p", { class: "field-error", id: errId, hidden: true }),
  );
}

const num = (attrs) => h("input", { type: "number", inputmode: "numeric", ...attrs });
const select = (options, value) =>
  h(
    "select",
    {},
    options.map(([v, text]) => h("option", { value: v, selected: v === value ? true : null }, text)),
  );

function readInt(form, name) {
  const el = form.elements[name];
  const v = el.value.trim();
  return v === "" ? undefined : Number(v);
}

/** The PlanRequest the form describes (throws {field, message} for JSON that does not parse). */
export function requestFromForm(form) {
  const parseJson = (name, what) => {
    try {
      return JSON.parse(form.elements[name].value);
    } catch (e) {
      throw { field: name, message: `not valid JSON (${e.message}); paste a ${what} object` };
    }
  };
  const picked = form.elements.model.value;
  let model = picked;
  if (picked === CUSTOM) model = parseJson("model_json", "ModelSpec");
  else if (picked === HF) {
    const cfg = parseJson("model_hf", "Hugging Face config.json");
    if (!cfg || typeof cfg !== "object" || Array.isArray(cfg)) throw { field: "model_hf", message: "paste the config.json object itself ({\"model_type\": …})" };
    const name = form.elements["model_hf_name"].value.trim();
    model = name ? { hf_config: cfg, name } : { hf_config: cfg };
  }
  const gpu = form.elements["cluster.gpu"].value === CUSTOM ? parseJson("gpu_json", "GpuSpec") : form.elements["cluster.gpu"].value;
  const parallel = {};
  for (const k of ["tp", "pp", "dp", "cp", "ep", "etp", "micro_batch_size", "virtual_stages"]) {
    const v = readInt(form, `parallel.${k}`);
    if (v !== undefined) parallel[k] = v;
  }
  for (const k of ["schedule", "recompute", "cp_comm"]) if (form.elements[`parallel.${k}`].value) parallel[k] = form.elements[`parallel.${k}`].value;
  const sp = form.elements["parallel.sequence_parallel"].value;
  if (sp) parallel.sequence_parallel = sp === "true";
  const z = form.elements["parallel.zero_stage"].value;
  if (z !== "") parallel.zero_stage = Number(z);
  const cuts = form.elements["parallel.stage_layers"].value.trim();
  if (cuts) {
    const parts = cuts.split(/[\s,]+/).filter(Boolean);
    const bad = parts.find((x) => !/^\d+$/.test(x));
    if (bad !== undefined) throw { field: "parallel.stage_layers", message: `“${bad}” is not a whole number; give one layer count per model chunk, e.g. 20, 20, 20, 20` };
    parallel.stage_layers = parts.map(Number);
  }
  const body = {
    model,
    cluster: { gpu, num_nodes: readInt(form, "cluster.num_nodes"), gpus_per_node: readInt(form, "cluster.gpus_per_node") },
    training: {
      global_batch_size: readInt(form, "training.global_batch_size"),
      seq_len: readInt(form, "training.seq_len"),
      precision: form.elements["training.precision"].value,
      optimizer: form.elements["training.optimizer"].value,
    },
    parallel,
    top_k: readInt(form, "top_k"),
    options: {
      time_limit_s: Number(form.elements["options.time_limit_s"].value || 10),
      allow_tp_across_nodes: form.elements["options.allow_tp_across_nodes"].checked,
    },
  };
  const stackSel = form.elements["training.stack"];
  if (stackSel && stackSel.value) body.training.stack = pickedValue(stackSel);
  const recipe = form.elements["training.fp8_recipe"];
  if (body.training.precision === "fp8" && recipe && recipe.value) body.training.fp8_recipe = recipe.value;
  const calSel = form.elements.calibration_id;
  const cal = calSel ? pickedValue(calSel) : "";
  if (cal && typeof cal === "object") body.calibration = cal;
  else if (cal) body.calibration_id = cal;
  const profile = form.elements.profile_id.value;
  if (profile) body.profile_id = profile;
  return body;
}

function fillForm(form, req) {
  const set = (name, v) => {
    if (form.elements[name] && v !== undefined && v !== null) form.elements[name].value = String(v);
  };
  if (typeof req.model === "string") set("model", req.model);
  else {
    set("model", CUSTOM);
    set("model_json", JSON.stringify(req.model, null, 2));
  }
  const c = req.cluster || {};
  if (typeof c.gpu === "string") set("cluster.gpu", c.gpu);
  else if (c.gpu) {
    set("cluster.gpu", CUSTOM);
    set("gpu_json", JSON.stringify(c.gpu, null, 2));
  }
  set("cluster.num_nodes", c.num_nodes);
  set("cluster.gpus_per_node", c.gpus_per_node);
  const t = req.training || {};
  for (const k of ["global_batch_size", "seq_len", "precision", "optimizer"]) set(`training.${k}`, t[k]);
  if (form.elements["training.stack"]) pick(form.elements["training.stack"], t.stack, (x) => `${x.base || "meshplan"} with overrides: ${JSON.stringify(x)}`);
  form.dispatchEvent(new CustomEvent("stackchange"));
  if (t.fp8_recipe) pick(form.elements["training.fp8_recipe"], t.fp8_recipe);
  if (form.elements.calibration_id) {
    if (req.calibration) pick(form.elements.calibration_id, req.calibration, (c) => `inline calibration from the plan: ${c.gpu} · ${c.stack}`);
    else if (req.calibration_id) pick(form.elements.calibration_id, req.calibration_id);
  }
  const p = req.parallel || {};
  for (const k of ["tp", "pp", "dp", "micro_batch_size", "virtual_stages", "schedule", "recompute", "zero_stage"]) set(`parallel.${k}`, p[k]);
  if (p.cp > 1) {
    set("parallel.cp", p.cp);
    if (p.cp_comm) pick(form.elements["parallel.cp_comm"], p.cp_comm);
  }
  for (const k of ["ep", "etp"]) if (p[k] !== undefined && p[k] !== null) set(`parallel.${k}`, p[k]);
  if (p.sequence_parallel !== undefined && p.sequence_parallel !== null) set("parallel.sequence_parallel", String(p.sequence_parallel));
  if (p.stage_layers) set("parallel.stage_layers", p.stage_layers.join(", "));
  set("top_k", req.top_k);
  if (req.options) {
    set("options.time_limit_s", req.options.time_limit_s);
    form.elements["options.allow_tp_across_nodes"].checked = !!req.options.allow_tp_across_nodes;
  }
  if (req.profile_id) set("profile_id", req.profile_id);
}

function clearErrors(form, summary) {
  for (const el of form.querySelectorAll(".field-error")) {
    el.hidden = true;
    el.textContent = "";
  }
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  put(summary);
}

/** The form control that a server error's field path (e.g. "cluster.num_nodes") belongs to. */
function controlFor(form, path, pasted) {
  if (pasted) return form.elements.request_json;
  let p = String(path || "").replace(/^body\.?/, "");
  if (p.startsWith("model") && form.elements.model.value === CUSTOM && p !== "model") return form.elements.model_json;
  // A Hugging Face config: whatever the server says of the model is about the pasted file.
  if (p.startsWith("model") && form.elements.model.value === HF) return form.elements.model_hf;
  if (p.startsWith("cluster.gpu") && form.elements["cluster.gpu"].value === CUSTOM && p !== "cluster.gpu") return form.elements.gpu_json;
  while (p) {
    const el = form.querySelector(`[data-field="${CSS.escape(p)}"]`);
    if (el) return el;
    p = p.includes(".") ? p.slice(0, p.lastIndexOf(".")) : "";
  }
  return null;
}

function showErrors(form, summary, err, pasted) {
  let errors = err.errors && err.errors.length ? err.errors : [{ field: err.field || "", message: err.detail || err.message || err.title }];
  // A pasted spec fails the union's "catalog id" branch too; that half of the error is noise.
  errors = errors.filter((e) => !(/valid string/i.test(e.message || "") && errors.some((o) => o.field && e.field && o.field.startsWith(`${e.field}.`))));
  const unplaced = [];
  const placed = [];
  for (const e of errors) {
    const el = e.field ? controlFor(form, e.field, pasted) : null;
    const text = `${e.message || "invalid value"}${e.fix ? ` — ${e.fix}` : ""}`;
    if (!el) {
      unplaced.push(e);
      continue;
    }
    el.setAttribute("aria-invalid", "true");
    const box = document.getElementById(`${el.id}-err`);
    box.hidden = false;
    box.append(h("span", {}, box.textContent ? " · " : "", el.dataset.field === e.field ? "" : `${e.field}: `, text));
    placed.push([el, e, text]);
  }
  const box = errorBox({ title: err.title || "The request was not accepted", status: err.status, detail: err.detail, errors: unplaced }, "The request was not accepted");
  if (placed.length) {
    box.append(
      h("p", {}, "Fix the marked field(s):"),
      h(
        "ul",
        { class: "error-links" },
        placed.map(([el, e, text]) => {
          const label = form.querySelector(`label[for="${CSS.escape(el.id)}"]`);
          return h("li", {}, h("a", { href: `#/new`, onclick: (ev) => { ev.preventDefault(); el.focus(); } }, label ? label.textContent : e.field), ` (${e.field}): ${text}`);
        }),
      ),
    );
  }
  summary.append(box);
  summary.focus();
}

export async function newPlanPage(root, { query }) {
  setTitle("New plan");
  root.append(h("h1", {}, "New plan"), loading("Loading the catalogs"));
  const [models, gpus, schedules, profiles, stacks, calibrations] = await Promise.all([
    api("/v1/catalog/models"),
    api("/v1/catalog/gpus"),
    api("/v1/catalog/schedules"),
    api("/v1/profiles", { query: { limit: 100 } }).catch(() => ({ items: [] })),
    api("/v1/catalog/stacks").catch(() => []),
    api("/v1/calibrations", { query: { limit: 100 } }).catch(() => ({ items: [] })),
  ]);
  const from = query.get("from");
  const base = from ? await api(`/v1/plans/${encodeURIComponent(from)}`).catch(() => null) : null;

  const modelSel = select(
    [...models.map((m) => [m.name, modelLabel(m)]), [HF, "Hugging Face config.json: paste or upload"], [CUSTOM, "Custom: paste a ModelSpec JSON"]],
    models.some((m) => m.name === "llama3-70b") ? "llama3-70b" : models[0] && models[0].name,
  );
  const gpuSel = select(
    [...gpus.map((g) => [g.id, `${g.id} — ${g.memory_gib} GiB, ${g.peak_tflops.bf16 || g.peak_tflops.fp32} TFLOP/s ${g.peak_tflops.bf16 ? "bf16" : "fp32"}`]), [CUSTOM, "Custom: paste a GpuSpec JSON"]],
    gpus.some((g) => g.id === "h100-sxm5-80gb") ? "h100-sxm5-80gb" : gpus[0] && gpus[0].id,
  );
  const modelJson = h("textarea", { rows: 8, spellcheck: "false", class: "code" });
  const hfJson = h("textarea", { rows: 8, spellcheck: "false", class: "code", placeholder: '{"model_type": "llama", "hidden_size": 4096, …}' });
  const hfFile = h("input", { type: "file", id: "f-model_hf_file", accept: ".json,application/json" });
  const hfStatus = h("span", { class: "sub", role: "status", "aria-live": "polite" });
  hfFile.addEventListener("change", async () => {
    const file = hfFile.files && hfFile.files[0];
    if (!file) return;
    hfJson.value = await file.text();
    hfStatus.textContent = ` Read ${file.name} (${fmt.bytes(file.size)}).`;
    const nameInput = form.elements["model_hf_name"];
    if (!nameInput.value.trim()) nameInput.value = file.name.replace(/\.json$/i, "").replace(/^config$/i, "");
  });
  const precisionSel = select(precisionOptions(null), "bf16");
  const recipeSel = select([], "");
  const cpCommSel = select([], "");
  const gpuJson = h("textarea", { rows: 8, spellcheck: "false", class: "code" });
  const nodes = num({ min: 1, required: true, value: 8 });
  const gpn = num({ min: 1, max: 64, required: true, value: 8 });
  const total = h("output", { class: "total", "aria-live": "polite" });
  const showTotal = () => (total.textContent = `= ${fmt.num((+nodes.value || 0) * (+gpn.value || 0))} GPUs`);
  nodes.addEventListener("input", showTotal);
  gpn.addEventListener("input", showTotal);

  const summary = h("div", { class: "form-summary", tabindex: "-1" });
  const submit = h("button", { type: "submit", class: "primary", id: "plan-submit" }, "Make the plan");
  const status = h("p", { class: "submit-status", role: "status", "aria-live": "polite" });
  const pasted = h("textarea", { rows: 10, spellcheck: "false", class: "code", placeholder: '{"model": "llama3-70b", "cluster": {...}, "training": {...}}' });

  const form = h(
    "form",
    { class: "plan-form", novalidate: true },
    summary,
    h(
      "fieldset",
      {},
      h("legend", {}, "Model"),
      field("model", "Model", modelSel, "From the catalog, or choose “Custom” to paste your own."),
      h("div", { class: "custom-json", hidden: true, "data-for": "model" }, field("model_json", "ModelSpec (JSON)", modelJson, "Fields as in planner/specs.py ModelSpec.")),
      h(
        "div",
        { class: "custom-json", hidden: true, "data-for": "hf" },
        field("model_hf", "Hugging Face config.json", hfJson, "Paste the file, or upload it below. Model types llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v3, gpt_oss, olmoe, kimi_k2, kimi_k25, glm4_moe, llama4."),
        h("div", { class: "field" }, h("label", { for: "f-model_hf_file" }, "Upload config.json"), hfFile, hfStatus),
        field("model_hf_name", "Model name (optional)", h("input", { type: "text", placeholder: "e.g. qwen3-8b" }), "How plans name the model; unset: from its model_type."),
      ),
      h("p", { class: "hint", id: "moe-note", hidden: true }, "Mixtures of experts are listed with their total and active parameters; they plan on the stacks that run expert parallelism (meshplan — the bundled runtime, whole experts per GPU —, megatron, torchtitan); on a stack without a MoE block the server says so next to the stack."),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Cluster"),
      field("cluster.gpu", "GPU", gpuSel),
      h("div", { class: "custom-json", hidden: true, "data-for": "gpu" }, field("gpu_json", "GpuSpec (JSON)", gpuJson, "Fields as in planner/specs.py GpuSpec.")),
      h("div", { class: "row" }, field("cluster.num_nodes", "Nodes", nodes), field("cluster.gpus_per_node", "GPUs per node", gpn), total),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Training"),
      h(
        "div",
        { class: "row" },
        field("training.global_batch_size", "Global batch (sequences)", num({ min: 1, required: true, value: 512 })),
        field("training.seq_len", "Sequence length (tokens)", num({ min: 1, required: true, value: 8192 })),
        field("training.precision", "Precision", precisionSel),
        h("div", { class: "fp8-only", hidden: true }, field("training.fp8_recipe", "FP8 recipe", recipeSel, "The FP8 scaling recipes the chosen training stack runs.")),
        field("training.optimizer", "Optimizer", select([["adam", "Adam"], ["sgd", "SGD"]], "adam")),
      ),
      stacks.length
        ? field(
            "training.stack",
            "Training stack",
            select(stacks.map((x) => [x.id, `${x.id} — ${x.title}`]), stacks.some((x) => x.id === "meshplan") ? "meshplan" : stacks[0].id),
            "The software that will run the plan: its kernels, attention, activation memory and overlap price the plan. Export to a launcher of the same stack.",
          )
        : null,
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Pins (optional)"),
      h("p", { class: "hint" }, "Leave empty to let the planner search; a value pins that setting."),
      h(
        "div",
        { class: "row" },
        field("parallel.tp", "Tensor parallel (tp)", num({ min: 1 })),
        field("parallel.pp", "Pipeline parallel (pp)", num({ min: 1 })),
        field("parallel.dp", "Data parallel (dp)", num({ min: 1 })),
        field("parallel.cp", "Context parallel (cp)", num({ min: 1 }), "Splits each sequence over cp GPUs."),
        field("parallel.cp_comm", "CP exchange", cpCommSel, "The exchanges the chosen stack runs."),
        field("parallel.micro_batch_size", "Micro-batch size", num({ min: 1 })),
      ),
      h(
        "div",
        { class: "row" },
        field("parallel.ep", "Expert parallel (ep)", num({ min: 1 }), "Mixtures of experts: the routed experts split over ep GPUs carved from dp."),
        field("parallel.etp", "Expert tensor parallel (etp)", num({ min: 1 }), "1 (whole experts) or tp (split like the dense MLP)."),
      ),
      h(
        "div",
        { class: "row" },
        // Only what the planner prices: the runtime-only (zero-bubble) schedules would be refused.
        field("parallel.schedule", "Pipeline schedule", select([["", "search"], ...schedules.filter((s) => s.priced).map((s) => [s.id, s.id])], ""), "Schedules the planner can price; leave on “search” to compare them."),
        field("parallel.virtual_stages", "Virtual stages", num({ min: 1 })),
        field("parallel.recompute", "Recompute", select([["", "search"], ["none", "none"], ["selective", "selective"], ["full", "full"]], "")),
        field("parallel.sequence_parallel", "Sequence parallel", select([["", "search"], ["true", "on"], ["false", "off"]], "")),
        field("parallel.zero_stage", "ZeRO stage", select([["", "search"], ["0", "0"], ["1", "1"], ["2", "2"], ["3", "3"]], "")),
      ),
      field("parallel.stage_layers", "Stage cuts (layers per model chunk)", h("input", { type: "text", placeholder: "e.g. 19, 21, 21, 19" }), "Comma-separated; one count per chunk (pp × virtual stages)."),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Search"),
      h(
        "div",
        { class: "row" },
        field("top_k", "Alternatives to keep (top k)", num({ min: 1, max: 20, value: 3 })),
        field("options.time_limit_s", "Solver time limit (s)", num({ min: 0.1, max: 600, step: "any", value: 10 })),
        field("profile_id", "Measured profile", select([["", "none (analytic costs)"], ...profiles.items.map((p) => [p.id, `${p.model} on ${p.device} (${p.source}, ${p.id})`])], "")),
        field("calibration_id", "Calibration", select([["", "none (built-in constants)"], ...calibrations.items.map((c) => [c.id, calibrationLabel(c)])], ""), "Residual constants fitted on your own runs (meshplan calibrate, POST /v1/calibrations)."),
      ),
      h("div", { class: "field check" }, h("input", { type: "checkbox", id: "f-allow-tp", name: "options.allow_tp_across_nodes", "data-field": "options.allow_tp_across_nodes" }), h("label", { for: "f-allow-tp" }, "Allow tensor-parallel groups to span nodes")),
    ),
    h(
      "details",
      { class: "paste" },
      h("summary", {}, "Or paste a whole request (JSON)"),
      field("request_json", "PlanRequest JSON — when this is not empty it is sent instead of the form", pasted),
      h("button", { type: "button", class: "secondary", onclick: () => fillPaste() }, "Copy the form into this box"),
    ),
    h("div", { class: "actions" }, submit, status),
  );
  const toggle = (sel, which) => {
    form.querySelector(`.custom-json[data-for="${which}"]`).hidden = sel.value !== CUSTOM;
  };
  const showModel = () => {
    toggle(modelSel, "model");
    form.querySelector('.custom-json[data-for="hf"]').hidden = modelSel.value !== HF;
    const m = models.find((x) => x.name === modelSel.value);
    form.querySelector("#moe-note").hidden = !(m && m.moe);
  };
  modelSel.addEventListener("change", showModel);
  // The FP8 recipes and CP exchanges offered are those of the chosen stack (GET /v1/catalog/stacks).
  const stackSel = form.elements["training.stack"];
  const refill = (sel, options) => {
    const keep = sel.value;
    put(sel, options.map(([v, text]) => h("option", { value: v }, text)));
    sel.value = options.some(([v]) => v === keep) ? keep : "";
  };
  const showStack = () => {
    const stack = stackOf(stacks, stackSel ? pickedValue(stackSel) : "meshplan");
    const precisions = precisionOptions(stack); // the stack's own (megatron-2020: fp16, fp32), its first by default
    refill(precisionSel, precisions);
    if (!precisionSel.value) precisionSel.value = precisions[0][0];
    showPrecision();
    refill(recipeSel, recipeOptions(stack));
    refill(cpCommSel, cpCommOptions(stack));
  };
  const showPrecision = () => (form.querySelector(".fp8-only").hidden = precisionSel.value !== "fp8");
  if (stackSel) stackSel.addEventListener("change", showStack);
  form.addEventListener("stackchange", showStack);
  precisionSel.addEventListener("change", showPrecision);
  showStack();
  gpuSel.addEventListener("change", () => toggle(gpuSel, "gpu"));
  function fillPaste() {
    try {
      pasted.value = JSON.stringify(requestFromForm(form), null, 2);
    } catch (e) {
      clearErrors(form, summary);
      showErrors(form, summary, { errors: [e] }, false);
    }
  }

  if (base && base.request) fillForm(form, base.request);
  showModel();
  showPrecision();
  toggle(gpuSel, "gpu");
  showTotal();

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(form, summary);
    const usePasted = pasted.value.trim() !== "";
    let body;
    try {
      body = usePasted ? JSON.parse(pasted.value) : requestFromForm(form);
    } catch (err) {
      showErrors(form, summary, usePasted ? { errors: [{ field: "request_json", message: `not valid JSON (${err.message})` }] } : { errors: [err] }, false);
      return;
    }
    submit.disabled = true;
    const limit = (body.options && body.options.time_limit_s) || 10;
    status.textContent = `Planning… the solver may take up to ${limit} s.`;
    try {
      const stored = await api("/v1/plans", { method: "POST", body });
      announce("Plan ready");
      location.hash = `#/plans/${encodeURIComponent(stored.id)}`;
    } catch (err) {
      status.textContent = "";
      showErrors(form, summary, err, usePasted);
    } finally {
      submit.disabled = false;
    }
  });

  put(root, 
    h("h1", {}, "New plan"),
    h("p", { class: "lead" }, "Describe the model, the cluster and the batch; meshplan searches tensor, pipeline and data parallelism, micro-batching, schedules, recomputation and ZeRO, and shows the fastest configuration that fits — with the reasons."),
    base ? h("p", { class: "note" }, "Pre-filled from plan ", h("a", { href: `#/plans/${encodeURIComponent(from)}` }, from), ".") : null,
    form,
  );
}
