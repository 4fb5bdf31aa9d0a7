// Hand-written SVG charts: bars (grouped or stacked, with reference lines), lines, a timeline and
// the device mesh. Every chart is a <figure> with a caption, an SVG with role="img" and a title,
// axes with units, a text legend, and its numbers in a data table (colour is never the only carrier).

import { h, s } from "./dom.js";

let uid = 0;

/** Mix a "#rrggbb" colour with white (t = 0: unchanged, 1: white); opaque, unlike fill-opacity. */
export function lighten(hex, t) {
  const n = parseInt(String(hex).slice(1, 7), 16);
  if (Number.isNaN(n) || !t) return hex;
  const mix = (c) => Math.round(c + (255 - c) * t).toString(16).padStart(2, "0");
  return `#${mix((n >> 16) & 255)}${mix((n >> 8) & 255)}${mix(n & 255)}`;
}

/** Black or white, whichever reads better on a fill colour "#rrggbb". */
export function inkOn(hex) {
  const n = parseInt(String(hex).slice(1, 7), 16);
  if (Number.isNaN(n)) return "#111";
  const [r, g, b] = [(n >> 16) & 255, (n >> 8) & 255, n & 255].map((c) => {
    const x = c / 255;
    return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
  });
  const L = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  return (L + 0.05) / 0.05 > 1.05 / (L + 0.05) ? "#111" : "#fff";
}
const nextId = (p) => `${p}-${++uid}`;

/** Colour-blind-safe categorical palette (Okabe & Ito), then a few extra tones. */
export const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#7F7F7F", "#332288", "#88CCEE", "#117733", "#AA4499"];

/** Round step sizes (1, 2, 5 × 10^k) so that [0, max] splits into about `count` intervals. */
export function niceTicks(max, count = 5) {
  if (!(max > 0) || !Number.isFinite(max)) return [0, 1];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || 10 * mag;
  const ticks = [];
  for (let v = 0; v < max + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  if (ticks[ticks.length - 1] < max) ticks.push(+(ticks[ticks.length - 1] + step).toPrecision(12));
  return ticks;
}

const grouped = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 4 });
const tickLabel = (v) => (Math.abs(v) < 0.01 && v !== 0 ? v.toExponential(1) : grouped.format(v));

export function dataTable(caption, headers, rows) {
  return h(
    "details",
    { class: "data-table" },
    h("summary", {}, "Show the numbers"),
    h("table", {}, h("caption", { class: "visually-hidden" }, caption), h("thead", {}, h("tr", {}, headers.map((c) => h("th", { scope: "col" }, c)))), h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => (i === 0 ? h("th", { scope: "row" }, c) : h("td", {}, c))))))),
  );
}

export function legend(items) {
  return h(
    "ul",
    { class: "legend" },
    items.map((it) => h("li", {}, h("span", { class: `swatch ${it.pattern ? "swatch-" + it.pattern : ""}`, style: it.pattern === "line" || it.pattern === "dots" ? `border-top-color:${it.color}` : `background-color:${it.color}`, "aria-hidden": "true" }), it.name)),
  );
}

function figure(title, svg, ...extra) {
  return h("figure", { class: "chart" }, h("figcaption", {}, title), h("div", { class: "chart-scroll" }, svg), ...extra);
}

function svgRoot(title, width, height, desc) {
  const tid = nextId("t");
  return s(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-labelledby": tid, class: "chart-svg", preserveAspectRatio: "xMinYMin meet" },
    s("title", { id: tid }, desc ? `${title}. ${desc}` : title),
  );
}

function yAxis(g, ticks, y, x0, x1, label) {
  for (const t of ticks) {
    g.append(s("line", { x1: x0, x2: x1, y1: y(t), y2: y(t), class: "grid" }));
    g.append(s("text", { x: x0 - 6, y: y(t), class: "tick", "text-anchor": "end", "dominant-baseline": "middle" }, tickLabel(t)));
  }
  g.append(s("line", { x1: x0, x2: x0, y1: y(ticks[0]), y2: y(ticks[ticks.length - 1]), class: "axis" }));
  const yMid = (y(ticks[0]) + y(ticks[ticks.length - 1])) / 2;
  g.append(s("text", { x: 14, y: yMid, class: "axis-label", "text-anchor": "middle", transform: `rotate(-90 14 ${yMid})` }, label));
}

/**
 * Vertical bars. series: [{name, color, values}] over `categories`; stacked or grouped.
 * lines: horizontal reference lines [{value, label, color}] (e.g. the GPU's memory).
 */
export function barChart({ title, desc = "", categories, series, stacked = false, unit = "", yLabel = "", lines = [], format = (v) => `${tickLabel(v)} ${unit}`, height = 280 }) {
  const n = categories.length;
  const groupW = Math.max(stacked ? 44 : 20 * series.length + 16, Math.min(110, 640 / Math.max(n, 1)));
  const m = { l: 64, r: lines.length ? 185 : 16, t: 14, b: 56 };
  const width = m.l + m.r + Math.max(n * groupW, 240);
  const totals = categories.map((_, i) => (stacked ? series.reduce((a, se) => a + (se.values[i] || 0), 0) : Math.max(0, ...series.map((se) => se.values[i] || 0))));
  const ticks = niceTicks(Math.max(...totals, ...lines.map((l) => l.value), 0) || 1);
  const yMax = ticks[ticks.length - 1];
  const y = (v) => m.t + (height - m.t - m.b) * (1 - v / yMax);
  const svg = svgRoot(title, width, height, desc);
  const g = s("g", {});
  svg.append(g);
  yAxis(g, ticks, y, m.l, width - m.r, yLabel || unit);
  const bars = s("g", { class: "bars" });
  g.append(bars);
  categories.forEach((cat, i) => {
    const gx = m.l + i * groupW;
    const bw = stacked ? groupW * 0.62 : (groupW - 12) / series.length;
    let acc = 0;
    series.forEach((se, k) => {
      const v = se.values[i] || 0;
      const x = stacked ? gx + (groupW - bw) / 2 : gx + 6 + k * bw;
      const top = stacked ? y(acc + v) : y(v);
      const hgt = stacked ? y(acc) - y(acc + v) : y(0) - y(v);
      if (v > 0) bars.append(s("rect", { x, y: top, width: Math.max(bw - (stacked ? 0 : 2), 1), height: Math.max(hgt, 0.5), fill: se.color, class: "bar", "data-series": se.name }, s("title", {}, `${cat} · ${se.name}: ${format(v)}`)));
      acc += v;
    });
    const label = String(cat);
    const lx = gx + groupW / 2;
    g.append(s("text", { x: lx, y: height - m.b + 16, class: "tick", "text-anchor": n > 8 ? "end" : "middle", transform: n > 8 ? `rotate(-35 ${lx} ${height - m.b + 16})` : null }, label.length > 18 ? label.slice(0, 17) + "…" : label));
  });
  g.append(s("line", { x1: m.l, x2: width - m.r, y1: y(0), y2: y(0), class: "axis" }));
  for (const l of lines) {
    g.append(s("line", { x1: m.l, x2: width - m.r + 6, y1: y(l.value), y2: y(l.value), class: "ref-line", stroke: l.color || "#b00020" }));
    g.append(s("text", { x: width - m.r + 10, y: y(l.value), class: "ref-label", "dominant-baseline": "middle", fill: l.color || "#b00020" }, `${l.label}: ${format(l.value)}`));
  }
  const rows = categories.map((cat, i) => [cat, ...series.map((se) => format(se.values[i] || 0)), ...(stacked && series.length > 1 ? [format(totals[i])] : [])]);
  const headers = ["", ...series.map((se) => se.name), ...(stacked && series.length > 1 ? ["total"] : [])];
  return figure(title, svg, series.length > 1 || lines.length ? legend([...series, ...lines.map((l) => ({ name: l.label, color: l.color || "#b00020", pattern: "line" }))]) : null, dataTable(title, headers, rows));
}

/**
 * Horizontal stacked bars, one row per category (e.g. the time breakdown of each alternative);
 * segments wide enough carry their own label.
 */
export function stackedRows({ title, desc = "", categories, series, unit = "", format = (v) => `${tickLabel(v)} ${unit}`, width = 1100 }) {
  const m = { l: 110, r: 24, t: 8, b: 44 };
  const rowH = 30;
  const height = m.t + categories.length * (rowH + 10) + m.b;
  const totals = categories.map((_, i) => series.reduce((a, se) => a + (se.values[i] || 0), 0));
  const xMax = Math.max(...totals, 0) || 1;
  const ticks = niceTicks(xMax, 8).filter((tk) => tk <= xMax * 1.0001);
  const x = (v) => m.l + ((width - m.l - m.r - 80) * v) / xMax;
  const svg = svgRoot(title, width, height, desc);
  const g = s("g", {});
  svg.append(g);
  const yEnd = height - m.b;
  for (const tk of ticks) {
    g.append(s("line", { x1: x(tk), x2: x(tk), y1: m.t, y2: yEnd, class: "grid" }));
    g.append(s("text", { x: x(tk), y: yEnd + 16, class: "tick", "text-anchor": "middle" }, tickLabel(tk)));
  }
  g.append(s("line", { x1: m.l, x2: m.l, y1: m.t, y2: yEnd, class: "axis" }));
  g.append(s("text", { x: (m.l + width - m.r) / 2, y: height - 6, class: "axis-label", "text-anchor": "middle" }, unit));
  categories.forEach((cat, i) => {
    const y = m.t + i * (rowH + 10);
    g.append(s("text", { x: m.l - 8, y: y + rowH / 2, class: "tick row-label", "text-anchor": "end", "dominant-baseline": "middle" }, cat));
    let acc = 0;
    for (const se of series) {
      const v = se.values[i] || 0;
      if (v > 0) {
        const bx = x(acc);
        const bw = Math.max(x(acc + v) - bx, 0.75);
        g.append(s("rect", { x: bx, y, width: bw, height: rowH, fill: se.color, class: "bar", stroke: "#fff", "stroke-width": bw > 3 ? 1 : 0, "data-series": se.name }, s("title", {}, `${cat} · ${se.name}: ${format(v)}`)));
        const text = `${se.name} ${format(v)}`;
        if (bw > 6.2 * text.length + 8) g.append(s("text", { x: bx + 5, y: y + rowH / 2, class: "block-label", fill: inkOn(se.color), "dominant-baseline": "middle", "pointer-events": "none" }, text));
      }
      acc += v;
    }
    g.append(s("text", { x: Math.min(x(acc) + 6, width - m.r), y: y + rowH / 2, class: "tick", "dominant-baseline": "middle", "text-anchor": x(acc) + 90 > width ? "end" : "start" }, format(totals[i])));
  });
  const rows = categories.map((cat, i) => [cat, ...series.map((se) => format(se.values[i] || 0)), format(totals[i])]);
  return figure(title, svg, legend(series), dataTable(title, ["", ...series.map((se) => se.name), "total"], rows));
}

/** Lines over a numeric x axis. series: [{name, color, points: [[x, y]], dashed}]; hlines like barChart's lines. */
export function lineChart({ title, desc = "", series, xLabel, yLabel, hlines = [], format = (v) => tickLabel(v), height = 260, width = 640 }) {
  const m = { l: 64, r: hlines.length ? 185 : 16, t: 14, b: 48 };
  const xs = series.flatMap((se) => se.points.map((p) => p[0]));
  const ys = series.flatMap((se) => se.points.map((p) => p[1]));
  const xMin = Math.min(...xs, 0);
  const xTicks = niceTicks(Math.max(...xs, 1) - xMin, 6).map((t) => t + xMin);
  const yTicks = niceTicks(Math.max(...ys, ...hlines.map((l) => l.value), 0) || 1);
  const x = (v) => m.l + ((width - m.l - m.r) * (v - xMin)) / (xTicks[xTicks.length - 1] - xMin || 1);
  const y = (v) => m.t + (height - m.t - m.b) * (1 - v / yTicks[yTicks.length - 1]);
  const svg = svgRoot(title, width, height, desc);
  const g = s("g", {});
  svg.append(g);
  yAxis(g, yTicks, y, m.l, width - m.r, yLabel);
  g.append(s("line", { x1: m.l, x2: width - m.r, y1: y(0), y2: y(0), class: "axis" }));
  for (const t of xTicks) {
    g.append(s("line", { x1: x(t), x2: x(t), y1: y(0), y2: y(0) + 4, class: "axis" }));
    g.append(s("text", { x: x(t), y: y(0) + 16, class: "tick", "text-anchor": "middle" }, tickLabel(t)));
  }
  g.append(s("text", { x: (m.l + width - m.r) / 2, y: height - 8, class: "axis-label", "text-anchor": "middle" }, xLabel));
  for (const se of series) {
    const d = se.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    g.append(s("path", { d, fill: "none", stroke: se.color, "stroke-width": 2, "stroke-dasharray": se.dashed ? "6 4" : null, class: "series-line", "data-series": se.name }, s("title", {}, se.name)));
    if (se.points.length <= 60) for (const p of se.points) g.append(s("circle", { cx: x(p[0]), cy: y(p[1]), r: 2.5, fill: se.color }, s("title", {}, `${se.name} at ${tickLabel(p[0])}: ${format(p[1])}`)));
  }
  for (const l of hlines) {
    g.append(s("line", { x1: m.l, x2: width - m.r + 6, y1: y(l.value), y2: y(l.value), class: "ref-line", stroke: l.color || "#b00020" }));
    g.append(s("text", { x: width - m.r + 10, y: y(l.value), class: "ref-label", "dominant-baseline": "middle", fill: l.color || "#b00020" }, `${l.label}: ${format(l.value)}`));
  }
  const rows = [];
  const n = Math.max(...series.map((se) => se.points.length));
  for (let i = 0; i < n; i++) rows.push([String(series[0].points[i] ? series[0].points[i][0] : i), ...series.map((se) => (se.points[i] ? format(se.points[i][1]) : "—"))]);
  return figure(title, svg, legend([...series, ...hlines.map((l) => ({ name: l.label, color: l.color || "#b00020", pattern: "line" }))]), dataTable(title, [xLabel, ...series.map((se) => se.name)], rows));
}

export const BLOCK_KINDS = {
  forward: { name: "forward (F)", color: "#56B4E9" },
  backward: { name: "backward (B)", color: "#D55E00", pattern: "hatch" },
  weight: { name: "weight gradient (W)", color: "#009E73" },
  dp_sync: { name: "data-parallel sync", color: "#CC79A7" },
  optimizer: { name: "optimizer", color: "#7F7F7F" },
};

/**
 * A schedule timeline: one row per pipeline stage, blocks [{start, dur, kind, label, tip}] in ms.
 * Idle time is drawn as a hatched background, so bubbles are visible without colour.
 */
export function timeline({ title, desc = "", rows, unit = "ms" }) {
  const isCompute = (b) => b.kind === "forward" || b.kind === "backward" || b.kind === "weight";
  const span = Math.max(0, ...rows.flatMap((r) => r.blocks.filter(isCompute).map((b) => b.start + b.dur)));
  const stats = rows.map((row) => {
    const busy = row.blocks.filter(isCompute).reduce((a, b) => a + b.dur, 0);
    return { busy, idle: span > 0 ? 1 - busy / span : 0 };
  });
  const draw = (plotW) => {
    const end = Math.max(...rows.flatMap((r) => r.blocks.map((b) => b.start + b.dur)), 1e-9);
    const m = { l: 76, r: 84, t: 10, b: 44 };
    const rowH = 26;
    const width = m.l + plotW + m.r;
    const height = m.t + rows.length * (rowH + 6) + m.b;
    const ticks = niceTicks(end, Math.max(4, Math.round(plotW / 120))).filter((tk) => tk <= end * 1.0001);
    const x = (v) => m.l + (plotW * v) / end;
    const svg = svgRoot(title, width, height, desc);
    svg.classList.add("timeline-svg");
    const idle = nextId("idle");
    svg.append(
      s(
        "defs",
        {},
        s("pattern", { id: idle, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, s("rect", { width: 6, height: 6, fill: "#f3f3f3" }), s("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#c8c8c8", "stroke-width": 2 })),
      ),
    );
    const defs = svg.querySelector("defs");
    const hatches = new Map(); // backward blocks: one hatch pattern per shade
    const hatchFor = (color) => {
      if (!hatches.has(color)) {
        const id = nextId("hatch");
        defs.append(s("pattern", { id, width: 5, height: 5, patternUnits: "userSpaceOnUse", patternTransform: "rotate(-45)" }, s("rect", { width: 5, height: 5, fill: color }), s("line", { x1: 0, y1: 0, x2: 0, y2: 5, stroke: "rgba(0,0,0,0.3)", "stroke-width": 1.5 })));
        hatches.set(color, `url(#${id})`);
      }
      return hatches.get(color);
    };
    const g = s("g", {});
    svg.append(g);
    for (const tk of ticks) {
      g.append(s("line", { x1: x(tk), x2: x(tk), y1: m.t, y2: height - m.b, class: "grid" }));
      g.append(s("text", { x: x(tk), y: height - m.b + 16, class: "tick", "text-anchor": "middle" }, tickLabel(tk)));
    }
    g.append(s("text", { x: m.l + plotW / 2, y: height - 6, class: "axis-label", "text-anchor": "middle" }, `time (${unit})`));
    rows.forEach((row, i) => {
      const ry = m.t + i * (rowH + 6);
      g.append(s("text", { x: m.l - 8, y: ry + rowH / 2, class: "tick row-label", "text-anchor": "end", "dominant-baseline": "middle" }, row.label));
      g.append(s("rect", { x: m.l, y: ry, width: x(span) - m.l, height: rowH, fill: `url(#${idle})`, class: "idle" }, s("title", {}, `${row.label}: idle (bubble) ${(stats[i].idle * 100).toFixed(1)} % of the pipeline phase`)));
      const blocks = s("g", { class: "blocks" });
      g.append(blocks);
      for (const b of row.blocks) {
        const kind = BLOCK_KINDS[b.kind] || { color: "#999" };
        const bx = x(b.start);
        const bw = Math.max(x(b.start + b.dur) - bx, 0.75);
        const color = b.chunkIndex > 0 ? lighten(kind.color, (0.45 * b.chunkIndex) / Math.max(1, b.chunks - 1)) : kind.color;
        blocks.append(s("rect", { x: bx, y: ry + 1, width: bw, height: rowH - 2, fill: kind.pattern === "hatch" && bw > 2 ? hatchFor(color) : color, class: `block block-${b.kind}`, stroke: "#fff", "stroke-width": bw > 3 ? 0.75 : 0 }, s("title", {}, b.tip || `${b.label} ${b.start.toFixed(2)}–${(b.start + b.dur).toFixed(2)} ${unit}`)));
        if (bw >= 7 * String(b.label).length + 4) blocks.append(s("text", { x: bx + bw / 2, y: ry + rowH / 2, class: "block-label", fill: inkOn(color), "text-anchor": "middle", "dominant-baseline": "middle", "pointer-events": "none" }, b.label));
      }
      g.append(s("text", { x: width - m.r + 6, y: ry + rowH / 2, class: "tick", "dominant-baseline": "middle" }, `idle ${(stats[i].idle * 100).toFixed(1)} %`));
    });
    return svg;
  };
  const base = 980;
  const zoomId = nextId("zoom");
  const zoom = h("select", { id: zoomId }, [1, 2, 4, 8, 16, 32].map((z) => h("option", { value: z }, `${z}×`)));
  const fig = figure(title, draw(base));
  const scroller = fig.querySelector(".chart-scroll");
  scroller.classList.add("timeline-scroll");
  scroller.setAttribute("tabindex", "0");
  scroller.setAttribute("aria-label", `${title} (scrollable)`);
  zoom.addEventListener("change", () => {
    const frac = scroller.scrollLeft / Math.max(1, scroller.scrollWidth);
    scroller.replaceChildren(draw(base * Number(zoom.value)));
    scroller.scrollLeft = frac * scroller.scrollWidth;
  });
  fig.insertBefore(h("div", { class: "field inline" }, h("label", { for: zoomId }, "Zoom"), zoom), scroller);
  const kinds = [...new Set(rows.flatMap((r) => r.blocks.map((b) => b.kind)))].filter((k) => BLOCK_KINDS[k]);
  const chunked = rows.some((r) => r.blocks.some((b) => b.chunkIndex > 0));
  fig.append(
    legend([...kinds.map((k) => BLOCK_KINDS[k]), { name: "idle (pipeline bubble)", color: "#f3f3f3", pattern: "idle" }]),
    ...(chunked ? [h("p", { class: "note" }, "Several model chunks per stage (interleaved): a later chunk's blocks are lighter; hover a block for its chunk.")] : []),
    dataTable(title, ["stage", "forward blocks", "backward blocks", `busy (${unit})`, `pipeline phase (${unit})`, "idle"], rows.map((row, i) => [row.label, String(row.blocks.filter((b) => b.kind === "forward").length), String(row.blocks.filter((b) => b.kind === "backward").length), stats[i].busy.toFixed(2), span.toFixed(2), `${(stats[i].idle * 100).toFixed(1)} %`])),
  );
  return fig;
}

/**
 * The device mesh: one row per node, one cell per GPU, filled by pipeline stage (and labelled
 * "S<stage>"), each tensor-parallel group outlined.
 */
/**
 * The device mesh: nodes × GPUs, each GPU filled by its pipeline stage, TP groups outlined. With context
 * parallelism (cpGroups: groups of more than one rank), each GPU also names its cp rank ("c<i>") and a
 * dashed line (class "cp-link") joins the members of each CP group on a node: the cp axis.
 */
export function meshGrid({ title, desc = "", numNodes, gpusPerNode, stageOf, dpOf, tpGroups, numStages, cpOf = null, cpGroups = [], epOf = null, edpOf = null, epGroups = [], maxNodes = 32 }) {
  const shownNodes = Math.min(numNodes, maxNodes);
  const cell = Math.max(22, Math.min(72, Math.floor(760 / gpusPerNode)));
  const hasCp = cpGroups.some((grp) => grp.length > 1);
  const hasEp = epGroups.some((grp) => grp.length > 1);
  const epY = hasCp ? 56 : 46; // the ep lines sit under the cp lines
  const cellH = (hasCp ? 56 : 46) + (hasEp ? 18 : 0); // room under the labels for the cp and ep lines
  const m = { l: 64, r: 12, t: 22, b: 8 };
  const width = m.l + gpusPerNode * cell + m.r;
  const height = m.t + shownNodes * (cellH + 10) + m.b;
  const svg = svgRoot(title, width, height, desc);
  const g = s("g", {});
  svg.append(g);
  for (let k = 0; k < gpusPerNode; k++) if (gpusPerNode <= 16 || k % 4 === 0) g.append(s("text", { x: m.l + k * cell + cell / 2, y: m.t - 8, class: "tick", "text-anchor": "middle" }, `GPU ${k}`));
  const showText = cell >= 40;
  for (let n = 0; n < shownNodes; n++) {
    const ny = m.t + n * (cellH + 10);
    g.append(s("text", { x: m.l - 8, y: ny + cellH / 2, class: "tick", "text-anchor": "end", "dominant-baseline": "middle" }, `node ${n}`));
    for (let k = 0; k < gpusPerNode; k++) {
      const rank = n * gpusPerNode + k;
      const stage = stageOf(rank);
      const cx = m.l + k * cell;
      if (stage === null) {
        g.append(s("rect", { x: cx + 2, y: ny, width: cell - 4, height: cellH, class: "gpu gpu-unused", fill: "#fff", stroke: "#aaa", "stroke-dasharray": "3 3" }, s("title", {}, `rank ${rank}: unused`)));
        continue;
      }
      const color = PALETTE[stage % PALETTE.length];
      const cp = cpOf ? cpOf(rank) : null;
      const cpText = cp === null || cp === undefined ? "" : `, context-parallel rank ${cp}`;
      const ep = epOf ? epOf(rank) : null;
      const epText = ep === null || ep === undefined ? "" : `, expert-parallel rank ${ep}, expert-data-parallel replica ${edpOf(rank)}`;
      g.append(s("rect", { x: cx + 2, y: ny, width: cell - 4, height: cellH, rx: 3, class: "gpu", fill: color, "fill-opacity": 0.35, stroke: color, "data-stage": stage, "data-cp": cp === null || cp === undefined ? null : cp, "data-ep": epText ? ep : null, "data-edp": epText ? edpOf(rank) : null }, s("title", {}, `rank ${rank} (node ${n}, GPU ${k}): pipeline stage ${stage}, data-parallel replica ${dpOf(rank)}${cpText}${epText}`)));
      if (showText) {
        g.append(s("text", { x: cx + cell / 2, y: ny + 16, class: "cell-label", "text-anchor": "middle" }, `S${stage}`));
        g.append(s("text", { x: cx + cell / 2, y: ny + 33, class: "cell-sub", "text-anchor": "middle" }, `r${rank}·d${dpOf(rank)}${cpText ? `·c${cp}` : ""}`));
        if (epText) g.append(s("text", { x: cx + cell / 2, y: ny + epY - 2, class: "cell-sub", "text-anchor": "middle" }, `e${ep}·x${edpOf(rank)}`));
      }
    }
  }
  // TP groups: outline each group's run of cells on each node it touches.
  const outlines = s("g", { class: "tp-groups" });
  g.append(outlines);
  tpGroups.forEach((grp, gi) => {
    if (grp.length < 2) return;
    const byNode = new Map();
    for (const r of grp) {
      const n = Math.floor(r / gpusPerNode);
      if (n >= shownNodes) continue;
      const k = r % gpusPerNode;
      const cur = byNode.get(n) || [k, k];
      byNode.set(n, [Math.min(cur[0], k), Math.max(cur[1], k)]);
    }
    for (const [n, [a, b]] of byNode) {
      const ny = m.t + n * (cellH + 10);
      outlines.append(s("rect", { x: m.l + a * cell, y: ny - 3, width: (b - a + 1) * cell, height: cellH + 6, rx: 6, class: "tp-outline" }, s("title", {}, `TP group ${gi}: ranks ${grp.join(", ")}`)));
    }
  });
  // A group's ranks on each shown node, as their places on the node (the CP and EP lines below).
  const ranksByNode = (grp) => {
    const byNode = new Map();
    for (const r of grp) {
      const n = Math.floor(r / gpusPerNode);
      if (n >= shownNodes) continue;
      if (!byNode.has(n)) byNode.set(n, []);
      byNode.get(n).push(r % gpusPerNode);
    }
    return byNode;
  };
  // CP groups: a dashed line through the cells of each group on each node it touches (the cp axis).
  const cpAxis = s("g", { class: "cp-axis" });
  g.append(cpAxis);
  cpGroups.forEach((grp, gi) => {
    if (grp.length < 2) return;
    for (const [n, ks] of ranksByNode(grp)) {
      const y = m.t + n * (cellH + 10) + 41 + (gi % 3) * 5; // staggered: interleaved groups stay apart
      const points = ks.map((k) => `${m.l + k * cell + cell / 2},${y}`).join(" ");
      const link = s("polyline", { points, class: "cp-link", "data-cp-group": gi }, s("title", {}, `CP group ${gi}: ranks ${grp.join(", ")} share one sequence`));
      cpAxis.append(link);
      for (const k of ks) cpAxis.append(s("circle", { cx: m.l + k * cell + cell / 2, cy: y, r: 2.5, class: "cp-dot" }));
    }
  });
  // EP groups (a mixture of experts' expert layers): a dotted line through the cells of each group on each node.
  const epAxis = s("g", { class: "ep-axis" });
  g.append(epAxis);
  epGroups.forEach((grp, gi) => {
    if (grp.length < 2) return;
    for (const [n, ks] of ranksByNode(grp)) {
      const y = m.t + n * (cellH + 10) + epY + 4 + (gi % 3) * 4; // staggered: interleaved groups stay apart
      const points = ks.map((k) => `${m.l + k * cell + cell / 2},${y}`).join(" ");
      epAxis.append(s("polyline", { points, class: "ep-link", "data-ep-group": gi }, s("title", {}, `EP group ${gi}: ranks ${grp.join(", ")} exchange their tokens' hidden states with one all-to-all per MoE layer`)));
      for (const k of ks) epAxis.append(s("rect", { x: m.l + k * cell + cell / 2 - 2.5, y: y - 2.5, width: 5, height: 5, class: "ep-dot" }));
    }
  });
  const extra = numNodes > shownNodes ? h("p", { class: "note" }, `Showing the first ${shownNodes} of ${numNodes} nodes; the pattern repeats.`) : null;
  const stages = [];
  for (let i = 0; i < numStages; i++) stages.push({ name: `S${i}: pipeline stage ${i}`, color: PALETTE[i % PALETTE.length] });
  const cpLegend = hasCp ? [{ name: "dashed line, “c” = one context-parallel group (the ranks that split one sequence), cp rank", color: "#111", pattern: "line" }] : [];
  const epLegend = hasEp ? [{ name: "dotted line, “e” = one expert-parallel group (the ranks one MoE layer's all-to-all spans), expert-parallel rank; “x” = expert-data-parallel replica", color: "#5b2a86", pattern: "dots" }] : [];
  return figure(title, svg, extra, legend([...stages, { name: "outlined box: one tensor-parallel group", color: "#fff", pattern: "outline" }, ...cpLegend, ...epLegend]));
}
