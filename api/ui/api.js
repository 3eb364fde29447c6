// The service's JSON API as the page calls it: relative URLs (the page may sit behind a
// proxy under a prefix), the operator's token as a bearer token, a timeout on every call,
// and one error type that says what went wrong in words an operator can act on.

const TIMEOUT_MS = 10000;

export class ApiError extends Error {
  /** status 0: the service could not be reached (or did not answer in time). */
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }

  get unauthorized() {
    return this.status === 401;
  }

  get forbidden() {
    return this.status === 403;
  }

  get unreachable() {
    return this.status === 0;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  /**
   * GET `path` (relative: "v1/tables") with `params` (arrays repeat the name) and its
   * JSON, or its text when `text` is set. `accept` lists statuses besides 2xx whose body
   * is the answer (/readyz answers 503 with its reasons while the service is not ready).
   */
  async get(path, params = {}, { text = false, accept = [] } = {}) {
    const url = new URL(path, document.baseURI);
    for (const [name, value] of Object.entries(params)) {
      if (value === null || value === undefined) continue;
      for (const item of Array.isArray(value) ? value : [value]) url.searchParams.append(name, String(item));
    }
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
    let response;
    try {
      response = await fetch(url, {
        headers: { Authorization: `Bearer ${this.token}`, Accept: text ? "text/plain" : "application/json" },
        cache: "no-store",
        signal: controller.signal,
      });
    } catch (error) {
      const why = error.name === "AbortError" ? `no answer within ${TIMEOUT_MS / 1000} s` : "the connection failed";
      throw new ApiError(0, "unreachable", `cannot reach the service (${why})`);
    } finally {
      clearTimeout(timer);
    }
    if (response.ok || accept.includes(response.status)) {
      return text ? response.text() : response.json();
    }
    throw await errorOf(response);
  }
}

/** The service's error body ({"error", "message"}) as an ApiError; any other body as its status. */
async function errorOf(response) {
  let code = `http_${response.status}`;
  let message = `${response.status} ${response.statusText || "error"}`;
  try {
    const body = await response.json();
    if (body && typeof body.message === "string") message = body.message;
    if (body && typeof body.error === "string") code = body.error;
  } catch {
    // not JSON: the status says it
  }
  return new ApiError(response.status, code, message);
}
