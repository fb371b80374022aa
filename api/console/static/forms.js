// The three create forms (video, extension, live stream) and how an API error finds its field.

import { $, $$, h, icon, toast, bytes } from "./dom.js";
import { ApiError } from "./api.js";

/** The field an error's `param` names: the exact `data-param`, else its longest dotted prefix
 * (`shots.1.prompt` -> the shot's prompt, `drift_correction.mode` -> drift correction). */
function fieldFor(form, param) {
  if (!param) return null;
  param = param.replace(/\[(\d+)\]/g, ".$1"); // shots[1].seconds -> shots.1.seconds
  let best = null;
  for (const field of $$(".field[data-param]", form)) {
    const p = field.dataset.param;
    if (field.closest("[hidden]")) continue;
    if (p === param) return field;
    if (param.startsWith(p + ".") && (!best || p.length > best.dataset.param.length)) best = field;
  }
  return best;
}

export function clearErrors(form) {
  for (const field of $$(".field.invalid", form)) {
    field.classList.remove("invalid");
    const msg = $(":scope > .field-error", field);
    if (msg) msg.textContent = "";
    for (const input of $$("input, select, textarea", field)) input.removeAttribute("aria-invalid");
  }
  const banner = $(":scope > .form-error", form);
  if (banner) {
    banner.hidden = true;
    banner.textContent = "";
  }
}

/** Show an API error next to the field it names (or above the form when it names none). */
export function showError(form, err, aliases = {}) {
  clearErrors(form);
  const param = aliases[err.param] || err.param;
  const field = fieldFor(form, param);
  let message = err.message;
  if (err.status === 429 && err.retryAfter) message += ` Retry in ${err.retryAfter} s.`;
  if (field) {
    field.classList.add("invalid");
    $(":scope > .field-error", field).textContent = message;
    const input = $("input:not([type=file]), select, textarea", field);
    const details = field.closest("details");
    if (details) details.open = true;
    if (input) {
      input.setAttribute("aria-invalid", "true");
      input.focus({ preventScroll: true });
    }
    (input || field).scrollIntoView({ block: "nearest", behavior: "smooth" });
  } else {
    const banner = $(":scope > .form-error", form);
    banner.replaceChildren(icon("alert"), h("span", message));
    banner.hidden = false;
  }
}

const num = (v) => (v === "" || v === null || v === undefined ? undefined : Number(v));
const text = (v) => (v && v.trim() ? v.trim() : undefined);

function busy(form, on) {
  const button = $("button[type=submit]", form);
  button.disabled = on;
  button.classList.toggle("loading", on);
}

export class Forms {
  constructor(api, session, config, { onCreated }) {
    this.api = api;
    this.session = session;
    this.config = config;
    this.onCreated = onCreated;
    this.models = new Map(session.models.map((m) => [m.id, m]));
    this.mode = "single";
    this.shots = [];
    this.image = null;
  }

  init() {
    for (const tab of $$(".tabs .tab")) tab.addEventListener("click", () => this.showTab(tab.dataset.tab));
    this.initVideo();
    this.initExtend();
    this.initStream();
  }

  showTab(name) {
    for (const tab of $$(".tabs .tab")) tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
    for (const panel of $$("[data-tab-panel]")) panel.hidden = panel.dataset.tabPanel !== name;
  }

  // -- video -------------------------------------------------------------------------------
  initVideo() {
    const form = $("#form-video");
    const select = $("#v-model");
    const models = this.session.models;
    select.replaceChildren(...models.map((m) => h("option", { value: m.id, title: m.description }, m.causal ? `${m.id} (causal)` : m.id)));
    if (this.session.default_model) select.value = this.session.default_model;
    select.addEventListener("change", () => this.modelChanged());
    $("#v-seconds").placeholder = String(this.session.default_seconds);
    const drift = $("#v-drift");
    for (const mode of this.session.drift_modes) drift.append(h("option", { value: mode }, mode));

    for (const b of $$(".seg-btn", form)) b.addEventListener("click", () => this.setMode(b.dataset.mode));
    $("#add-shot").addEventListener("click", () => {
      this.shots.push({ prompt: "", seconds: 2 });
      this.renderShots();
      $$("#shots textarea").at(-1).focus();
    });
    for (const id of ["#v-seconds", "#v-size"]) $(id).addEventListener("input", () => this.estimate());

    $("#v-image-hint").textContent = `PNG, JPEG or WebP up to ${bytes(this.config.max_upload_bytes)} · the video starts from it`;
    const input = $("#v-image");
    input.addEventListener("change", () => this.setImage(input.files[0] || null));
    $("#v-image-clear").addEventListener("click", (e) => {
      e.preventDefault();
      this.setImage(null);
    });
    const zone = $("#dropzone");
    zone.addEventListener("dragover", (e) => {
      e.preventDefault();
      zone.classList.add("over");
    });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (e) => {
      e.preventDefault();
      zone.classList.remove("over");
      if (e.dataTransfer.files[0]) this.setImage(e.dataTransfer.files[0]);
    });

    form.addEventListener("input", (e) => {
      const field = e.target.closest(".field.invalid");
      if (field) {
        field.classList.remove("invalid");
        $(":scope > .field-error", field).textContent = "";
      }
    });
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.submitVideo();
    });
    this.modelChanged();
  }

  modelChanged() {
    const m = this.models.get($("#v-model").value);
    if (!m) return;
    $("#v-size").placeholder = m.size;
    $("#v-steps").placeholder = String(m.steps);
    $("#v-guidance").placeholder = String(m.guidance_scale);
    $("#v-sizes").replaceChildren(...(m.sizes.length ? m.sizes : [m.size]).map((s) => h("option", { value: s })));
    this.estimate();
  }

  estimate() {
    const m = this.models.get($("#v-model").value);
    if (!m) return;
    const seconds = this.mode === "shots" ? this.shots.reduce((a, s) => a + (Number(s.seconds) || 0), 0) : num($("#v-seconds").value) ?? this.session.default_seconds;
    const size = $("#v-size").value.trim() || m.size;
    const frames = Math.round(seconds * m.fps);
    $("#v-estimate").textContent = frames > 0 ? `${frames} frames · ${size} · ${m.fps} fps` : "";
  }

  setMode(mode) {
    if (mode === this.mode) return;
    this.mode = mode;
    const form = $("#form-video");
    for (const b of $$(".seg-btn", form)) b.setAttribute("aria-pressed", String(b.dataset.mode === mode));
    for (const el of $$(".single-only", form)) el.hidden = mode !== "single";
    for (const el of $$(".shots-only", form)) el.hidden = mode !== "shots";
    if (mode === "shots" && !this.shots.length) {
      const seconds = num($("#v-seconds").value) ?? 2;
      this.shots = [{ prompt: $("#v-prompt").value, seconds }, { prompt: "", seconds: 2 }];
    }
    clearErrors(form);
    this.renderShots();
  }

  renderShots() {
    const list = $("#shots");
    list.replaceChildren(
      ...this.shots.map((shot, i) => {
        const prompt = h("textarea", { rows: 2, placeholder: i ? "what happens next" : "the opening shot", "aria-label": `Shot ${i + 1} prompt` });
        prompt.value = shot.prompt;
        prompt.addEventListener("input", () => {
          shot.prompt = prompt.value;
        });
        const seconds = h("input", { type: "number", min: "0", step: "any", inputmode: "decimal", "aria-label": `Shot ${i + 1} seconds` });
        seconds.value = shot.seconds;
        seconds.addEventListener("input", () => {
          shot.seconds = seconds.value;
          this.renderTimeline();
          this.estimate();
        });
        const remove = h("button.btn.btn-icon.btn-sm", { type: "button", title: "Remove shot", disabled: this.shots.length <= 1, onclick: () => {
          this.shots.splice(i, 1);
          this.renderShots();
        } }, icon("x"));
        return h("li.shot", { dataset: { index: i } },
          h("span.shot-num", String(i + 1)),
          h("div.field.shot-prompt", { dataset: { param: `shots.${i}.prompt` } }, prompt, h("p.field-error", { role: "alert" })),
          h("div.field.shot-seconds", { dataset: { param: `shots.${i}.seconds` } }, h("div.suffix", seconds, h("span", "s")), h("p.field-error", { role: "alert" })),
          remove);
      }));
    this.renderTimeline();
    this.estimate();
  }

  renderTimeline() {
    const total = this.shots.reduce((a, s) => a + Math.max(0, Number(s.seconds) || 0), 0);
    $("#shots-total").textContent = `${this.shots.length} shot${this.shots.length === 1 ? "" : "s"} · ${+total.toFixed(2)} s`;
    $("#timeline").replaceChildren(
      ...this.shots.map((s, i) => {
        const seg = h(`div.tl-shot.tl-${i % 6}`, h("span", `${i + 1}`));
        seg.style.flexGrow = String(Math.max(0.05, Number(s.seconds) || 0));
        return seg;
      }));
  }

  setImage(file) {
    this.image = file;
    const full = $("#dropzone .dz-full");
    const empty = $("#dropzone .dz-empty");
    const preview = $("#v-image-preview");
    if (preview.src) URL.revokeObjectURL(preview.src);
    if (!file) {
      $("#v-image").value = "";
      preview.removeAttribute("src");
      full.hidden = true;
      empty.hidden = false;
      return;
    }
    preview.src = URL.createObjectURL(file);
    $(".dz-name", full).textContent = `${file.name} · ${bytes(file.size)}`;
    full.hidden = false;
    empty.hidden = true;
  }

  videoRequest() {
    const body = {};
    if (this.mode === "single") {
      body.prompt = $("#v-prompt").value;
      body.seconds = num($("#v-seconds").value);
    } else {
      body.shots = this.shots.map((s) => ({ prompt: s.prompt, seconds: num(s.seconds) ?? 0 }));
    }
    body.model = $("#v-model").value || undefined;
    body.size = text($("#v-size").value);
    body.seed = num($("#v-seed").value);
    body.steps = num($("#v-steps").value);
    body.guidance_scale = num($("#v-guidance").value);
    body.negative_prompt = text($("#v-negative").value);
    const mode = $("#v-drift").value;
    if (mode) body.drift_correction = { mode };
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    if (!this.image) return body;
    const form = new FormData();
    for (const [k, v] of Object.entries(body)) form.append(k, typeof v === "object" ? JSON.stringify(v) : String(v));
    form.append("input_reference", this.image, this.image.name);
    return form;
  }

  async submit(form, path, body, aliases) {
    clearErrors(form);
    busy(form, true);
    try {
      const job = await this.api.post(path, body);
      this.onCreated(job);
      return job;
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      showError(form, err, aliases);
      return null;
    } finally {
      busy(form, false);
    }
  }

  async submitVideo() {
    // With shots, `seconds` is the shots' total: the API's error about it belongs to the timeline.
    const aliases = this.mode === "shots" ? { seconds: "shots", prompt: "shots" } : {};
    const job = await this.submit($("#form-video"), "/v1/videos", this.videoRequest(), aliases);
    if (job) toast("Video queued. Watch it render on the right.", "ok");
  }

  // -- extension -----------------------------------------------------------------------------
  initExtend() {
    const form = $("#form-extend");
    this.setSources([]);
    form.addEventListener("input", (e) => {
      const field = e.target.closest(".field.invalid");
      if (field) field.classList.remove("invalid");
    });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = { video: { id: $("#e-video").value }, prompt: $("#e-prompt").value, seconds: num($("#e-seconds").value) };
      const anchor = $("#e-anchor").value;
      if (anchor) body.drift_correction = { anchor };
      if (body.seconds === undefined) delete body.seconds;
      const job = await this.submit(form, "/v1/videos/extensions", body);
      if (job) toast("Extension queued.", "ok");
    });
  }

  /** The completed videos an extension can continue (the list's, newest first). */
  setSources(jobs) {
    const select = $("#e-video");
    const current = select.value;
    const ok = jobs.filter((j) => j.status === "completed" && !j.stream);
    if (!ok.length) {
      select.replaceChildren(h("option", { value: "" }, "No completed video yet"));
      return;
    }
    select.replaceChildren(...ok.map((j) => {
      const prompt = j.prompt.length > 48 ? j.prompt.slice(0, 47) + "…" : j.prompt;
      return h("option", { value: j.id }, `${prompt} · ${j.seconds} s · ${j.id.slice(6, 12)}`);
    }));
    if (ok.some((j) => j.id === current)) select.value = current;
  }

  extendFrom(job, jobs) {
    this.setSources(jobs);
    $("#e-video").value = job.id;
    this.showTab("extend");
    $("#e-prompt").focus();
  }

  // -- live stream ---------------------------------------------------------------------------
  initStream() {
    const form = $("#form-stream");
    const select = $("#s-model");
    const causal = this.session.models.filter((m) => m.causal);
    if (!causal.length) {
      select.replaceChildren(h("option", { value: "" }, "no block-causal model on this server"));
      select.disabled = true;
    } else {
      select.replaceChildren(...causal.map((m) => h("option", { value: m.id, title: m.description }, m.id)));
      if (this.session.default_stream_model) select.value = this.session.default_stream_model;
    }
    const update = () => {
      const m = this.models.get(select.value);
      if (!m) return;
      $("#s-size").placeholder = m.size;
      $("#s-steps").placeholder = String(m.steps);
      $("#s-sizes").replaceChildren(...(m.sizes.length ? m.sizes : [m.size]).map((s) => h("option", { value: s })));
    };
    select.addEventListener("change", update);
    update();
    form.addEventListener("input", (e) => {
      const field = e.target.closest(".field.invalid");
      if (field) field.classList.remove("invalid");
    });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = {
        stream: true,
        prompt: $("#s-prompt").value,
        model: select.value || undefined,
        seconds: num($("#s-seconds").value),
        size: text($("#s-size").value),
        seed: num($("#s-seed").value),
        steps: num($("#s-steps").value),
      };
      for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
      const job = await this.submit(form, "/v1/videos", body);
      if (job) toast("Live stream starting…", "ok");
    });
  }
}
