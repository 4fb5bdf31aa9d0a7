// Profiles: the stored per-layer profiles, and one profile's FLOPs, time and memory per layer kind,
// measured beside analytic where a stored analytic profile of the same model exists.

import { api } from "../api.js";
import { barChart } from "../charts.js";
import { empty, fmt, h, loading, put, section, setTitle } from "../dom.js";

const KINDS = ["embedding", "transformer_block", "lm_head"];
const key = (l) => `${l.micro_batch_size}|${l.seq_len}|${l.tp}|${l.sequence_parallel ? 1 : 0}`;
const keyLabel = (l) => `micro-batch ${l.micro_batch_size} · seq ${l.seq_len} · tp ${l.tp}${l.sequence_parallel ? " · sequence parallel" : ""}`;

export async function profilesPage(root, { query }) {
  setTitle("Profiles");
  root.append(h("h1", {}, "Profiles"), loading("Loading profiles"));
  const offset = Math.max(0, Number(query.get("offset") || 0));
  const list = await api("/v1/profiles", { query: { limit: 50, offset } });
  put(root, 
    h("h1", {}, "Profiles"),
    h("p", { class: "lead" }, "Per-layer measurements uploaded with ", h("code", {}, "POST /v1/profiles"), " (e.g. from ", h("code", {}, "meshplan profile"), "). A plan request can use one instead of the analytic costs."),
    list.items.length
      ? h(
          "div",
          { class: "table-scroll" },
          h(
            "table",
            { class: "list" },
            h("thead", {}, h("tr", {}, ["Model", "Device", "Source", "Created"].map((c) => h("th", { scope: "col" }, c)))),
            h("tbody", {}, list.items.map((p) => h("tr", {}, h("td", {}, h("a", { href: `#/profiles/${encodeURIComponent(p.id)}` }, p.model), h("div", { class: "sub" }, p.id)), h("td", {}, p.device), h("td", {}, p.source), h("td", {}, fmt.date(p.created_at))))),
          ),
        )
      : empty("No profiles stored yet. Upload one with POST /v1/profiles."),
    list.total > 50 ? h("p", { class: "note" }, `Showing ${list.items.length} of ${list.total}.`) : null,
  );
}

async function analyticTwin(profile, selfId) {
  if (profile.source === "analytic") return null;
  try {
    const list = await api("/v1/profiles", { query: { model: profile.model.name, limit: 100 } });
    const item = list.items.find((p) => p.source === "analytic" && p.id !== selfId);
    return item ? { id: item.id, profile: (await api(`/v1/profiles/${encodeURIComponent(item.id)}`)).profile } : null;
  } catch {
    return null;
  }
}

export async function profilePage(root, { arg: id }) {
  setTitle(`Profile ${id}`);
  root.append(h("h1", {}, "Profile"), loading("Loading the profile"));
  const stored = await api(`/v1/profiles/${encodeURIComponent(id)}`);
  const prof = stored.profile;
  const twin = await analyticTwin(prof, stored.id);
  setTitle(`Profile of ${prof.model.name}`);
  const points = [...new Map(prof.layers.map((l) => [key(l), l])).values()];
  const pointSel = h("select", { id: "profile-point" }, points.map((l) => h("option", { value: key(l) }, keyLabel(l))));
  const charts = h("div", {});
  const render = () => {
    const k = pointSel.value;
    const layers = KINDS.map((kind) => prof.layers.find((l) => l.kind === kind && key(l) === k) || null);
    const ana = KINDS.map((kind) => (twin ? twin.profile.layers.find((l) => l.kind === kind && key(l) === k) || null : null));
    const hasAna = ana.some(Boolean);
    const cats = KINDS.filter((_, i) => layers[i]);
    const pick = (arr, f) => KINDS.map((_, i) => i).filter((i) => layers[i]).map((i) => (arr[i] ? f(arr[i]) : 0));
    const src = prof.source;
    const flops = barChart({
      title: "FLOPs per layer (per GPU, one micro-batch)",
      categories: cats,
      series: [
        { name: `forward (${src})`, color: "#0072B2", values: pick(layers, (l) => l.fwd_flops / 1e9) },
        { name: `backward (${src})`, color: "#D55E00", values: pick(layers, (l) => l.bwd_flops / 1e9) },
        ...(hasAna && src !== "analytic" ? [{ name: "forward (analytic)", color: "#56B4E9", values: pick(ana, (l) => l.fwd_flops / 1e9) }, { name: "backward (analytic)", color: "#E69F00", values: pick(ana, (l) => l.bwd_flops / 1e9) }] : []),
      ],
      unit: "GFLOP",
      yLabel: "GFLOP",
      format: (v) => `${fmt.num(v, v < 10 ? 3 : 1)} GFLOP`,
    });
    const timed = layers.some((l) => l && (l.fwd_time_s !== null && l.fwd_time_s !== undefined));
    const time = timed
      ? barChart({
          title: "Measured time per layer (one micro-batch)",
          categories: cats,
          series: [
            { name: "forward", color: "#0072B2", values: pick(layers, (l) => (l.fwd_time_s || 0) * 1000) },
            { name: "backward", color: "#D55E00", values: pick(layers, (l) => (l.bwd_time_s || 0) * 1000) },
          ],
          unit: "ms",
          yLabel: "time (ms)",
          format: (v) => `${fmt.num(v, 3)} ms`,
        })
      : empty(`This ${src} profile has no timings (only measured profiles do).`);
    const mib = (b) => b / 2 ** 20;
    const params = barChart({
      title: "Parameter memory per layer (per GPU)",
      categories: cats,
      series: [{ name: src, color: "#0072B2", values: pick(layers, (l) => mib(l.param_bytes)) }, ...(hasAna && src !== "analytic" ? [{ name: "analytic", color: "#56B4E9", values: pick(ana, (l) => mib(l.param_bytes)) }] : [])],
      unit: "MiB",
      yLabel: "MiB",
      format: (v) => `${fmt.num(v, 2)} MiB`,
    });
    const acts = barChart({
      title: "Activation memory saved for backward, by recompute mode (per GPU, one micro-batch)",
      categories: cats,
      series: [
        { name: `none (${src})`, color: "#009E73", values: pick(layers, (l) => mib(l.saved_activation_bytes.none)) },
        { name: `selective (${src})`, color: "#E69F00", values: pick(layers, (l) => mib(l.saved_activation_bytes.selective)) },
        { name: `full (${src})`, color: "#CC79A7", values: pick(layers, (l) => mib(l.saved_activation_bytes.full)) },
        ...(hasAna && src !== "analytic" ? [{ name: "none (analytic)", color: "#88CCEE", values: pick(ana, (l) => mib(l.saved_activation_bytes.none)) }] : []),
      ],
      unit: "MiB",
      yLabel: "MiB",
      format: (v) => `${fmt.num(v, 2)} MiB`,
    });
    const ratioRows = hasAna && src !== "analytic"
      ? h(
          "div",
          { class: "table-scroll" },
          h(
            "table",
            { class: "compare", id: "measured-vs-analytic" },
            h("caption", {}, `${src} ÷ analytic (1.00 = agree)`),
            h("thead", {}, h("tr", {}, ["layer", "forward FLOPs", "backward FLOPs", "parameters", "activations (none)"].map((x) => h("th", { scope: "col" }, x)))),
            h(
              "tbody",
              {},
              KINDS.map((kind, i) => (layers[i] && ana[i] ? h("tr", {}, h("th", { scope: "row" }, kind), [["fwd_flops"], ["bwd_flops"], ["param_count"], ["saved_activation_bytes", "none"]].map(([f, sub]) => {
                const a = sub ? layers[i][f][sub] : layers[i][f];
                const b = sub ? ana[i][f][sub] : ana[i][f];
                return h("td", { class: "num" }, b ? fmt.num(a / b, 3) : "—");
              })) : null)),
            ),
          ),
        )
      : h("p", { class: "note" }, src === "analytic" ? "This is an analytic profile." : "No stored analytic profile of this model to compare with; showing the measured side only.");
    put(charts, 
      h("div", { class: "side-by-side" }, section("flops", "FLOPs", flops), section("time", "Time", time), section("params", "Parameter memory", params), section("activations", "Activation memory", acts)),
      section("compare", "Measured vs. analytic", ratioRows, twin ? h("p", { class: "sub" }, "Analytic profile: ", h("a", { href: `#/profiles/${encodeURIComponent(twin.id)}` }, twin.id)) : null),
    );
  };
  pointSel.addEventListener("change", render);
  put(root, 
    h("h1", {}, `Profile of ${prof.model.name}`),
    h("p", { class: "sub" }, `${prof.source} on ${prof.device} · ${prof.dtype}${prof.torch_version ? ` · torch ${prof.torch_version}` : ""} · ${prof.layers.length} entries · ${stored.id} · ${fmt.date(stored.created_at)}`),
    h("div", { class: "field" }, h("label", { for: "profile-point" }, "Shape"), pointSel),
    charts,
  );
  render();
}
