// The dashboard shell: hash routes → pages, the API-token field, focus and title on navigation.

import { getToken, setToken } from "./api.js";
import { announce, errorBox, h, put, setTitle } from "./dom.js";
import { newPlanPage } from "./pages/new-plan.js";
import { openPlanPage } from "./pages/open-plan.js";
import { planPage } from "./pages/plan.js";
import { plansPage } from "./pages/plans.js";
import { profilePage, profilesPage } from "./pages/profiles.js";
import { runPage, runsPage } from "./pages/runs.js";

const ROUTES = [
  [/^\/?$/, () => ({ page: newPlanPage, nav: "new" })],
  [/^\/new$/, () => ({ page: newPlanPage, nav: "new" })],
  [/^\/open$/, () => ({ page: openPlanPage, nav: "open" })],
  [/^\/plans$/, () => ({ page: plansPage, nav: "plans" })],
  [/^\/plans\/([^/]+)$/, (m) => ({ page: planPage, nav: "plans", arg: m[1] })],
  [/^\/profiles$/, () => ({ page: profilesPage, nav: "profiles" })],
  [/^\/profiles\/([^/]+)$/, (m) => ({ page: profilePage, nav: "profiles", arg: m[1] })],
  [/^\/runs$/, () => ({ page: runsPage, nav: "runs" })],
  [/^\/runs\/([^/]+)$/, (m) => ({ page: runPage, nav: "runs", arg: m[1] })],
];

/** "#/plans/abc?model=x" → {path: "/plans/abc", query: URLSearchParams} */
export function parseHash(hash = location.hash) {
  const raw = hash.replace(/^#/, "") || "/new";
  const [path, qs] = raw.split("?");
  return { path, query: new URLSearchParams(qs || "") };
}


let renderSeq = 0;

async function render() {
  const seq = ++renderSeq;
  const { path, query } = parseHash();
  const main = document.getElementById("main");
  let route = null;
  for (const [re, make] of ROUTES) {
    const m = re.exec(path);
    if (m) {
      route = make(m.map((x) => (x === undefined ? x : decodeURIComponent(x))));
      break;
    }
  }
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (route && a.dataset.nav === route.nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  put(main);
  if (!route) {
    setTitle("Not found");
    main.append(h("h1", {}, "Page not found"), errorBox({ title: "No such page", detail: `There is no page at #${path}.` }), h("p", {}, h("a", { href: "#/new" }, "Make a new plan")));
    return;
  }
  const container = h("div", { class: "page" });
  main.append(container);
  try {
    // Pages render into their container (loading state first) and may keep updating it.
    await route.page(container, { arg: route.arg, query, isCurrent: () => seq === renderSeq });
  } catch (err) {
    if (seq !== renderSeq) return;
    put(container, h("h1", {}, "Error"), errorBox(err));
  }
  if (seq === renderSeq && document.activeElement === document.body) main.focus({ preventScroll: true });
}

function initToken() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  const badge = document.getElementById("token-state");
  const show = () => (badge.textContent = getToken() ? "set" : "none");
  const details = form.closest("details");
  const close = () => {
    details.open = false;
    details.querySelector("summary").focus();
  };
  details.addEventListener("keydown", (e) => e.key === "Escape" && details.open && close());
  input.value = getToken();
  show();
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    show();
    close();
    announce(getToken() ? "API token saved for this tab" : "API token cleared");
    render();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    input.value = "";
    setToken("");
    show();
    announce("API token cleared");
    render();
  });
}

document.querySelector(".skip-link").addEventListener("click", (e) => {
  e.preventDefault();
  const main = document.getElementById("main");
  main.focus();
  main.scrollIntoView();
});

window.addEventListener("hashchange", () => {
  // In-page anchors ("#main") are not routes.
  if (location.hash && !location.hash.startsWith("#/")) return;
  render().then(() => {
    const main = document.getElementById("main");
    main.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  });
});
initToken();
render();
