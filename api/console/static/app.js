// The console's entry point: theme, sign-in, then the forms and the job list.

import { $, icon, toast } from "./dom.js";
import { Api, ApiError } from "./api.js";
import { Forms, showError, clearErrors } from "./forms.js";
import { Jobs } from "./jobs.js";

const THEME_STORAGE = "videogen.theme";

function applyTheme(theme) {
  const dark = theme ? theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  $("#theme").replaceChildren(icon(dark ? "sun" : "moon"));
}

function initTheme() {
  applyTheme(localStorage.getItem(THEME_STORAGE));
  $("#theme").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    localStorage.setItem(THEME_STORAGE, next);
    applyTheme(next);
  });
}

async function pollReady() {
  const el = $("#server-state");
  try {
    const r = await fetch("/readyz", { cache: "no-store" });
    const body = await r.json();
    el.dataset.state = r.ok ? "ok" : "bad";
    const failing = Object.entries(body.checks || {}).filter(([, v]) => v !== "ok").map(([k]) => k);
    $(".label", el).textContent = r.ok ? `ready · ${body.mode}` : failing.length === 1 && failing[0] === "worker" ? "worker starting" : `not ready${failing.length ? `: ${failing.join(", ")}` : ""}`;
    el.title = r.ok ? "The server is ready" : body.error?.message || "not ready";
  } catch {
    el.dataset.state = "bad";
    $(".label", el).textContent = "offline";
  }
  setTimeout(pollReady, el.dataset.state === "ok" ? 10000 : 2000);
}

class Console {
  constructor() {
    this.api = new Api();
    this.api.onUnauthorized = () => this.signOut("Your API key was not accepted any more. Sign in again.");
  }

  async boot() {
    initTheme();
    pollReady();
    try {
      this.config = await (await fetch("/v1/console/config", { cache: "no-store" })).json();
    } catch {
      toast("The server does not answer.", "error");
      return;
    }
    $("#form-signin").addEventListener("submit", (e) => {
      e.preventDefault();
      this.signIn($("#api-key").value.trim());
    });
    $("#sign-out").addEventListener("click", () => this.signOut());
    if (this.config.auth_required && !this.api.key) return this.showSignIn();
    return this.signIn(this.api.key);
  }

  showSignIn(message) {
    $("#app").hidden = true;
    $("#signin").hidden = false;
    $("#sign-out").hidden = true;
    $("#tenant").hidden = true;
    const form = $("#form-signin");
    clearErrors(form);
    if (message) showError(form, new ApiError(401, { error: { message, param: "api_key" } }));
    $("#api-key").focus();
  }

  async signIn(key) {
    const form = $("#form-signin");
    if (this.config.auth_required && !key) {
      return showError(form, new ApiError(400, { error: { message: "Paste an API key.", param: "api_key" } }));
    }
    this.api.setKey(this.config.auth_required ? key : "");
    let session;
    try {
      session = await this.api.get("/v1/console/session");
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      this.api.setKey("");
      this.showSignIn();
      return showError(form, new ApiError(err.status, { error: { message: err.message, param: "api_key" } }));
    }
    this.start(session);
  }

  signOut(message) {
    this.api.setKey("");
    location.hash = "";
    if (message) sessionStorage.setItem("videogen.signOutMessage", message);
    location.reload();
  }

  start(session) {
    $("#signin").hidden = true;
    $("#app").hidden = false;
    const tenant = $("#tenant");
    tenant.textContent = session.tenant;
    tenant.title = `Signed in as tenant ${session.tenant}`;
    tenant.hidden = false;
    $("#sign-out").hidden = !this.config.auth_required;
    this.forms = new Forms(this.api, session, this.config, { onCreated: (job) => this.jobs.add(job) });
    this.jobs = new Jobs(this.api, {
      onJobsChanged: (jobs) => this.forms.setSources(jobs),
      onExtend: (job) => this.forms.extendFrom(job, this.jobs.list()),
      onServerDown: () => toast("The server does not answer; retrying.", "error"),
    });
    this.forms.init();
    this.jobs.init();
    document.body.dataset.ready = "true";
  }
}

const message = sessionStorage.getItem("videogen.signOutMessage");
sessionStorage.removeItem("videogen.signOutMessage");
const app = new Console();
app.boot().then(() => {
  if (message && !$("#signin").hidden) showError($("#form-signin"), new ApiError(401, { error: { message, param: "api_key" } }));
});
