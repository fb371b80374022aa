// The API client: every call carries `Authorization: Bearer <key>` (the key lives in session
// storage), errors come back as ApiError with OpenAI's {message, type, param, code}.

const KEY_STORAGE = "videogen.apiKey";

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.param = e.param || null;
    this.code = e.code || null;
    this.type = e.type || null;
    this.retryAfter = null;
  }
}

export class Api {
  constructor() {
    this.key = sessionStorage.getItem(KEY_STORAGE) || "";
    this.onUnauthorized = () => {};
  }

  setKey(key) {
    this.key = key || "";
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  }

  headers(extra = {}) {
    return this.key ? { Authorization: `Bearer ${this.key}`, ...extra } : { ...extra };
  }

  /** fetch() + error handling; `json` sends a JSON body, `form` a FormData (multipart). */
  async raw(method, path, { json, form, signal, headers } = {}) {
    const init = { method, headers: this.headers(headers), signal, cache: "no-store" };
    if (json !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(json);
    } else if (form !== undefined) {
      init.body = form;
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError(0, { error: { message: "The server does not answer. Is `videogen serve` running?", code: "network" } });
    }
    if (!response.ok) {
      let body = null;
      try {
        body = await response.json();
      } catch {}
      const err = new ApiError(response.status, body);
      err.retryAfter = response.headers.get("Retry-After");
      if (response.status === 401 && path !== "/v1/console/session") this.onUnauthorized(err);
      throw err;
    }
    return response;
  }

  async get(path, opts) {
    return (await this.raw("GET", path, opts)).json();
  }
  async post(path, body, opts = {}) {
    const payload = body instanceof FormData ? { form: body } : { json: body };
    return (await this.raw("POST", path, { ...payload, ...opts })).json();
  }
  async del(path) {
    return (await this.raw("DELETE", path)).json();
  }
  async blob(path, opts) {
    return (await this.raw("GET", path, opts)).blob();
  }

  /**
   * Server-Sent Events through fetch (EventSource cannot send the Authorization header).
   * Calls onEvent(type, data, id) for each event; reconnects with Last-Event-ID after a dropped
   * connection; resolves when the server ends the stream (after the job's terminal status).
   */
  async events(videoId, onEvent, signal) {
    let lastId = "";
    for (let attempt = 0; !signal.aborted; attempt++) {
      try {
        const headers = lastId ? { "Last-Event-ID": lastId, Accept: "text/event-stream" } : { Accept: "text/event-stream" };
        const response = await this.raw("GET", `/v1/videos/${videoId}/events`, { signal, headers });
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return; // the server ends it after the terminal status
          attempt = 0;
          buffer += value.replace(/\r\n/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let type = "message", data = "", id = null;
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) type = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).trim();
              else if (line.startsWith("id:")) id = line.slice(3).trim();
            }
            if (id) lastId = id;
            if (data) onEvent(type, JSON.parse(data), id);
          }
        }
      } catch (err) {
        if (signal.aborted || (err instanceof ApiError && err.status >= 400 && err.status < 500)) return;
        await new Promise((r) => setTimeout(r, Math.min(10000, 500 * 2 ** attempt)));
      }
    }
  }
}
