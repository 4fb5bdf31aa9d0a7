// Plans: the stored plans, filterable by model and GPU (server-side) and searchable (this page).

import { api } from "../api.js";
import { empty, fmt, h, loading, put, setTitle } from "../dom.js";

const PAGE = 25;

export async function plansPage(root, { query }) {
  setTitle("Plans");
  const model = query.get("model") || "";
  const gpu = query.get("gpu") || "";
  const offset = Math.max(0, Number(query.get("offset") || 0));
  root.append(h("h1", {}, "Plans"), loading("Loading plans"));
  const [models, gpus, list] = await Promise.all([
    api("/v1/catalog/models").catch(() => []),
    api("/v1/catalog/gpus").catch(() => []),
    api("/v1/plans", { query: { model, gpu, limit: PAGE, offset } }),
  ]);

  const go = (changes) => {
    const q = new URLSearchParams({ model, gpu, offset: String(offset), ...changes });
    for (const [k, v] of [...q]) if (!v || v === "0") q.delete(k);
    location.hash = `#/plans${q.toString() ? "?" + q : ""}`;
  };
  const modelSel = h("select", { id: "filter-model" }, h("option", { value: "" }, "any model"), models.map((m) => h("option", { value: m.name, selected: m.name === model || null }, m.name)));
  const gpuSel = h("select", { id: "filter-gpu" }, h("option", { value: "" }, "any GPU"), gpus.map((g) => h("option", { value: g.id, selected: g.id === gpu || null }, g.id)));
  const search = h("input", { id: "filter-text", type: "search", placeholder: "id, model, GPU, status…" });
  modelSel.addEventListener("change", () => go({ model: modelSel.value, offset: "0" }));
  gpuSel.addEventListener("change", () => go({ gpu: gpuSel.value, offset: "0" }));

  const filters = h(
    "form",
    { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "field" }, h("label", { for: "filter-model" }, "Model"), modelSel),
    h("div", { class: "field" }, h("label", { for: "filter-gpu" }, "GPU"), gpuSel),
    h("div", { class: "field grow" }, h("label", { for: "filter-text" }, "Search this page"), search),
  );

  const body = h("tbody", {});
  const rows = list.items.map((p) => {
    const tr = h(
      "tr",
      {},
      h("td", {}, h("a", { href: `#/plans/${encodeURIComponent(p.id)}` }, p.model), p.stale ? h("span", { class: "badge stale", title: "Made by an older cost model: open it to re-plan" }, " older cost model") : null, h("div", { class: "sub" }, p.id)),
      h("td", {}, `${p.num_gpus} × ${p.gpu}`),
      h("td", {}, h("span", { class: `badge status-${String(p.status).toLowerCase()}` }, p.status)),
      h("td", { class: "num" }, fmt.time(p.step_time_s)),
      h("td", { class: "num" }, fmt.si(p.tokens_per_s)),
      h("td", { class: "num" }, fmt.pct(p.mfu)),
      h("td", {}, p.fits === null || p.fits === undefined ? "—" : p.fits ? "fits" : "does not fit"),
      h("td", {}, fmt.date(p.created_at)),
    );
    tr.dataset.search = `${p.id} ${p.model} ${p.gpu} ${p.status} ${p.num_gpus}${p.stale ? " stale older cost model" : ""}`.toLowerCase();
    if (p.stale) tr.classList.add("stale");
    return tr;
  });
  body.append(...rows);
  const none = h("p", { class: "state state-empty", hidden: true }, "No plan on this page matches the search.");
  search.addEventListener("input", () => {
    const q = search.value.trim().toLowerCase();
    let shown = 0;
    for (const tr of rows) {
      tr.hidden = q && !tr.dataset.search.includes(q);
      shown += tr.hidden ? 0 : 1;
    }
    none.hidden = shown > 0;
  });

  const table = h(
    "table",
    { class: "list" },
    h("caption", { class: "visually-hidden" }, "Stored plans: the best configuration's figures"),
    h("thead", {}, h("tr", {}, ["Model", "Cluster", "Solver", "Step time", "Tokens/s", "MFU", "Memory", "Created"].map((c, i) => h("th", { scope: "col", class: i >= 3 && i <= 5 ? "num" : null }, c)))),
    body,
  );
  const pager = h(
    "nav",
    { class: "pager", "aria-label": "Pages" },
    h("button", { type: "button", class: "secondary", disabled: offset <= 0 || null, onclick: () => go({ offset: String(Math.max(0, offset - PAGE)) }) }, "← Newer"),
    h("span", {}, list.total ? `${offset + 1}–${Math.min(offset + list.items.length, list.total)} of ${list.total}` : "0 plans"),
    h("button", { type: "button", class: "secondary", disabled: offset + PAGE >= list.total || null, onclick: () => go({ offset: String(offset + PAGE) }) }, "Older →"),
  );
  put(root, 
    h("div", { class: "page-head" }, h("h1", {}, "Plans"), h("a", { class: "button primary", href: "#/new" }, "New plan")),
    filters,
    list.items.length
      ? h("div", { class: "table-scroll" }, table)
      : empty(model || gpu ? "No stored plan matches these filters." : "No plans yet.", h("a", { href: "#/new" }, "Make the first plan")),
    none,
    list.total > PAGE || offset ? pager : null,
  );
}
