// Small DOM helpers: build elements without innerHTML (server data is only ever set as text),
// number formatting, and the loading / empty / error states every page shows.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  return el;
}

/** An HTML element: h("p", {class: "x"}, "text", child, [more]). */
export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** Replace an element's children (null/undefined/false children are skipped). */
export function put(el, ...children) {
  return append(clear(el), children);
}

// ---------------------------------------------------------------------------------------------
// Formatting

const nf = (digits) => new Intl.NumberFormat("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

export const fmt = {
  /** seconds → "1,234.5 ms" or "12.3 s" */
  time(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    if (Math.abs(seconds) < 1) return `${nf(seconds * 1000 < 10 ? 2 : 1).format(seconds * 1000)} ms`;
    return `${nf(seconds < 100 ? 2 : 1).format(seconds)} s`;
  },
  ms(seconds) {
    return seconds === null || seconds === undefined ? "—" : `${nf(1).format(seconds * 1000)} ms`;
  },
  num(x, digits = 0) {
    return x === null || x === undefined ? "—" : nf(digits).format(x);
  },
  pct(x, digits = 1) {
    return x === null || x === undefined ? "—" : `${nf(digits).format(x * 100)} %`;
  },
  gib(x) {
    return x === null || x === undefined ? "—" : `${nf(x < 10 ? 2 : 1).format(x)} GiB`;
  },
  /** A parameter count: 70.6 B, 340 M. */
  count(x) {
    if (x === null || x === undefined) return "—";
    for (const [p, sfx] of [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "k"]]) if (Math.abs(x) >= p) return `${nf(x / p < 10 ? 2 : 1).format(x / p)} ${sfx}`;
    return String(x);
  },
  /** A large count with an SI suffix: 1.2 G, 340 M. */
  si(x, unit = "") {
    if (x === null || x === undefined) return "—";
    const a = Math.abs(x);
    for (const [p, sfx] of [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
      if (a >= p) return `${nf(a / p < 10 ? 2 : 1).format(x / p)} ${sfx}${unit}`;
    }
    return `${nf(a < 10 && a % 1 ? 2 : 0).format(x)} ${unit}`.trim();
  },
  bytes(x) {
    if (x === null || x === undefined) return "—";
    for (const [p, sfx] of [[2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]]) {
      if (Math.abs(x) >= p) return `${nf(x / p < 10 ? 2 : 1).format(x / p)} ${sfx}`;
    }
    return `${x} B`;
  },
  date(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" });
  },
  bool(x) {
    return x === null || x === undefined ? "—" : x ? "yes" : "no";
  },
};

/** The GPU id of a cluster (catalog id string or inline spec). */
export function gpuId(cluster) {
  const g = cluster && cluster.gpu;
  return typeof g === "string" ? g : g ? g.id : "?";
}

// ---------------------------------------------------------------------------------------------
// Page title and screen-reader announcements

export function setTitle(text) {
  document.title = text ? `${text} · meshplan` : "meshplan";
}

export function announce(text) {
  const a = document.getElementById("announcer");
  if (!a) return;
  a.textContent = "";
  setTimeout(() => (a.textContent = text), 30);
}

// ---------------------------------------------------------------------------------------------
// States

export function loading(what = "Loading") {
  return h("p", { class: "state state-loading", role: "status", "aria-live": "polite" }, h("span", { class: "spinner", "aria-hidden": "true" }), `${what}…`);
}

export function empty(message, ...extra) {
  return h("div", { class: "state state-empty" }, h("p", {}, message), ...extra);
}

/** An error box for an ApiError (problem+json) or any Error. */
export function errorBox(err, heading = "Something went wrong") {
  const title = err && err.title ? err.title : heading;
  const box = h(
    "div",
    { class: "state state-error", role: "alert" },
    h("p", { class: "error-title" }, err && err.status ? `${title} (HTTP ${err.status})` : title),
  );
  const list = (err && err.errors) || [];
  // The detail often repeats the (single) listed error; show it only when it adds something.
  const repeats = list.length && err.detail && list.some((e) => e.message && err.detail.includes(e.message));
  if (err && err.detail && !repeats) box.append(h("p", {}, err.detail));
  else if (err && err.message && !err.title && !list.length) box.append(h("p", {}, err.message));
  if (list.length) {
    box.append(h("ul", {}, list.map((e) => h("li", {}, h("code", {}, e.field || "body"), ": ", e.message || "", e.fix ? ` — ${e.fix}` : ""))));
  }
  if (err && err.status === 401) {
    box.append(h("p", {}, "This server needs an API token: enter it under “API token” at the top of the page."));
  }
  return box;
}

/** A section with a heading, an id (for the in-page contents) and its body. */
export function section(id, title, ...children) {
  return h("section", { id, class: "card", "aria-labelledby": `${id}-h` }, h("h2", { id: `${id}-h` }, title), ...children);
}
