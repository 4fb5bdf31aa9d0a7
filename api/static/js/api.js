// The public REST API (docs/architecture.md, "REST contract"), and nothing else.

const TOKEN_KEY = "meshplan.apiToken";

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An RFC 9457 problem (or a network failure), with the failing fields of a validation error. */
export class ApiError extends Error {
  constructor({ status = 0, title = "Request failed", detail = "", errors = [] } = {}) {
    super(detail || title);
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.errors = Array.isArray(errors) ? errors : [];
  }
}

function headers(extra = {}) {
  const out = { Accept: "application/json", ...extra };
  const token = getToken();
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

export function url(path, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const qs = q.toString();
  return qs ? `${path}?${qs}` : path;
}

async function problemOf(res) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    /* not JSON */
  }
  if (body && typeof body === "object" && !Array.isArray(body)) {
    // problem+json; tolerate FastAPI's default {detail: [...]} shape too.
    const errors = Array.isArray(body.errors)
      ? body.errors
      : Array.isArray(body.detail)
        ? body.detail.map((d) => ({ field: (d.loc || []).filter((p) => p !== "body").join("."), message: d.msg }))
        : [];
    return new ApiError({
      status: res.status,
      title: body.title || res.statusText || "Request failed",
      detail: typeof body.detail === "string" ? body.detail : "",
      errors,
    });
  }
  return new ApiError({ status: res.status, title: res.statusText || "Request failed" });
}

/** fetch JSON; throws ApiError on a non-2xx answer or a network failure. */
export async function api(path, { method = "GET", body, query } = {}) {
  let res;
  try {
    res = await fetch(url(path, query), {
      method,
      headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}),
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
  } catch (e) {
    throw new ApiError({ title: "The server could not be reached", detail: String(e.message || e) });
  }
  if (!res.ok) throw await problemOf(res);
  if (res.status === 204) return null;
  return res.json();
}

/** Download a file through fetch (so the bearer token is sent), saving it under its served name;
 * ``onResponse(res)`` sees the answer first (e.g. its warning headers). */
export async function download(href, fallbackName, onResponse) {
  const res = await fetch(href, { headers: headers({ Accept: "*/*" }) });
  if (!res.ok) throw await problemOf(res);
  if (onResponse) onResponse(res);
  const disposition = res.headers.get("Content-Disposition") || "";
  const m = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
  const name = m ? decodeURIComponent(m[1]) : fallbackName;
  const blob = await res.blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  return name;
}
