// The tenant's jobs: the list (polled), live progress of running jobs over SSE (segment by
// segment, retries included), and the selected job's detail: progress, live frames, the finished
// video, its downloads and drift plot, cancel and delete.

import { $, h, icon, ago, clock, duration, statusPill, toast, TERMINAL } from "./dom.js";
import { ApiError } from "./api.js";
import { LiveView } from "./live.js";
import { showError, clearErrors } from "./forms.js";

const MAX_WATCHERS = 3; // SSE connections held at once (a browser allows 6 per origin over HTTP/1.1)
const LOG_LIMIT = 400;
const VARIANTS = {
  video: { label: "Video", ext: "mp4" },
  thumbnail: { label: "Thumbnail", ext: "png" },
  drift_report: { label: "Drift report", ext: "drift.json" },
  drift_plot: { label: "Drift plot", ext: "drift.png" },
};

const active = (job) => job && !TERMINAL.has(job.status);

export class Jobs {
  constructor(api, { onJobsChanged, onExtend, onServerDown }) {
    this.api = api;
    this.onJobsChanged = onJobsChanged;
    this.onExtend = onExtend;
    this.onServerDown = onServerDown || (() => {});
    this.jobs = new Map(); // id -> the video object, plus what SSE told (_segment, _step, _steps)
    this.order = []; // ids, newest first
    this.logs = new Map(); // id -> [{time, kind, text}]
    this.watchers = new Map(); // id -> AbortController of its SSE reader
    this.history = new Set(); // ids whose finished event history was loaded
    this.media = new Map(); // id -> {variant: object URL | null (absent)}
    this.rows = new Map(); // id -> list row element
    this.selected = null;
    this.live = null;
    this.detailKey = null; // what the detail shows: "<id>:<active|status>", "" for the empty state
    this.dirty = new Set();
  }

  init() {
    $("#refresh").addEventListener("click", () => this.refresh());
    this.refresh(true);
  }

  list() {
    return this.order.map((id) => this.jobs.get(id)).filter(Boolean);
  }

  // -- data --------------------------------------------------------------------------------------
  async refresh(first = false) {
    clearTimeout(this.timer);
    try {
      const page = await this.api.get("/v1/videos?limit=50");
      const ids = page.data.map((j) => j.id);
      for (const job of page.data) this.merge(job);
      for (const id of [...this.jobs.keys()]) if (!ids.includes(id) && id !== this.selected) this.forget(id);
      if (this.selected && !ids.includes(this.selected) && this.jobs.has(this.selected)) ids.unshift(this.selected);
      this.order = ids;
      if (first && !this.selected && ids.length) this.selected = ids[0];
      this.renderList();
      this.ensureWatchers();
      this.renderDetail();
      this.onJobsChanged(this.list());
    } catch (err) {
      if (err instanceof ApiError && err.status === 0) this.onServerDown();
      else if (err instanceof ApiError && err.status !== 401) toast(err.message, "error");
    }
    this.timer = setTimeout(() => this.refresh(), this.list().some(active) ? 3000 : 15000);
  }

  /** A fresher video object; SSE may have seen more steps than a list fetched a moment earlier. */
  merge(job) {
    const old = this.jobs.get(job.id);
    const next = { ...old, ...job };
    if (old && old.status === job.status && (old.steps_done || 0) > (job.steps_done || 0)) {
      for (const k of ["progress", "steps_done", "segments_done", "segment_retries", "retries_used"]) next[k] = old[k];
    }
    this.jobs.set(job.id, next);
    return next;
  }

  add(job) {
    this.merge(job);
    this.order = [job.id, ...this.order.filter((id) => id !== job.id)];
    this.select(job.id);
    this.onJobsChanged(this.list());
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), 3000);
  }

  forget(id) {
    this.jobs.delete(id);
    this.logs.delete(id);
    this.history.delete(id);
    this.watchers.get(id)?.abort();
    this.watchers.delete(id);
    for (const url of Object.values(this.media.get(id) || {})) if (url) URL.revokeObjectURL(url);
    this.media.delete(id);
    this.rows.delete(id);
  }

  // -- live progress (SSE) -------------------------------------------------------------------------
  ensureWatchers() {
    const want = [this.selected, ...this.order].filter((id, i, all) => id && all.indexOf(id) === i && active(this.jobs.get(id)));
    const keep = new Set(want.slice(0, MAX_WATCHERS));
    for (const [id, ctrl] of this.watchers) {
      const job = this.jobs.get(id);
      if (keep.has(id) || (job && !active(job))) continue; // a finished job's history load ends by itself
      ctrl.abort();
      this.watchers.delete(id);
    }
    for (const id of keep) if (!this.watchers.has(id)) this.watch(id);
    const sel = this.jobs.get(this.selected);
    if (sel && !active(sel) && !this.history.has(sel.id) && !this.watchers.has(sel.id)) this.watch(sel.id);
  }

  watch(id) {
    const ctrl = new AbortController();
    this.watchers.set(id, ctrl);
    this.logs.set(id, []); // the stream replays every event from the start
    this.api.events(id, (type, data) => this.onEvent(id, type, data), ctrl.signal).finally(async () => {
      if (this.watchers.get(id) === ctrl) this.watchers.delete(id);
      if (ctrl.signal.aborted) return;
      this.history.add(id);
      try {
        if (this.jobs.has(id)) this.merge(await this.api.get(`/v1/videos/${id}`));
      } catch {}
      this.changed(id);
      this.ensureWatchers();
      this.onJobsChanged(this.list());
    });
  }

  onEvent(id, type, data) {
    const job = this.jobs.get(id);
    if (!job) return;
    for (const k of ["progress", "steps_done", "steps_total", "segments_done", "segments_total"]) if (k in data) job[k] = data[k];
    const log = (kind, text) => {
      const entries = this.logs.get(id) || [];
      entries.push({ time: Date.now() / 1000, kind, text });
      if (entries.length > LOG_LIMIT) entries.splice(0, entries.length - LOG_LIMIT);
      this.logs.set(id, entries);
    };
    const seg = (i) => `Segment ${i + 1}${job.segments_total ? ` of ${job.segments_total}` : ""}`;
    if (type === "status") {
      job.status = data.status;
      if (data.error) job.error = data.error;
      if (data.status === "in_progress") {
        job.started_at = job.started_at || Date.now() / 1000;
        const extra = [data.attempt > 1 ? `attempt ${data.attempt}` : "", data.resumed_segments ? `${data.resumed_segments} segment(s) restored` : ""].filter(Boolean);
        log("status", `Rendering started${extra.length ? ` (${extra.join(", ")})` : ""}`);
      } else if (data.status === "queued") {
        log("status", data.reason ? `Back in the queue: ${data.reason}` : "Queued");
      } else if (data.status === "failed") {
        log("error", `Failed: ${(data.error && data.error.message) || "unknown error"}`);
      } else {
        log(data.status, data.status === "completed" ? "Completed" : "Cancelled");
      }
    } else if (type === "progress") {
      if ("chunk" in data) {
        job._chunk = data.chunk;
        if (job.stream) {
          job.stream.frames_done = data.steps_done;
          job.stream.chunks_done = data.segments_done;
          job.stream.prompt = data.prompt;
        }
      } else {
        job._segment = data.segment;
        job._step = data.step + 1;
        job._steps = data.steps;
      }
    } else if (type === "segment") {
      job._segment = data.index + 1;
      job._step = 0;
      log("segment", `${seg(data.index)} ${data.resumed ? "restored from its checkpoint" : "done"} · ${data.frames_written} frames written`);
    } else if (type === "retry") {
      const retries = job.segment_retries || [];
      if (!retries.some((r) => r.segment === data.segment && r.attempt === data.attempt)) retries.push({ segment: data.segment, attempt: data.attempt, reasons: data.reasons });
      job.segment_retries = retries;
      job.retries_used = retries.length;
      const what = job.stream ? `Chunk ${data.segment + 1}` : seg(data.segment);
      log("retry", `${what} failed the health gate (${data.reasons.join(", ")}): re-sampling, retry ${data.attempt}`);
    } else if (type === "prompt") {
      if (job.stream) {
        job.stream.prompt = data.prompt;
        job.stream.prompt_switches = [...(job.stream.prompt_switches || []), data];
      }
      log("prompt", `Prompt switched at ${Number(data.at_seconds).toFixed(2)} s (frame ${data.frame}): “${data.prompt}”`);
    }
    this.changed(id);
  }

  /** Re-render a job's row and, when selected, the detail, at most once a frame. */
  changed(id) {
    this.dirty.add(id);
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      for (const d of this.dirty) {
        const job = this.jobs.get(d);
        if (job && this.rows.has(d)) this.updateRow(job);
      }
      if (this.dirty.has(this.selected)) this.renderDetail();
      this.dirty.clear();
    });
  }

  // -- list ----------------------------------------------------------------------------------------
  renderList() {
    const list = $("#job-list");
    const jobs = this.list();
    $("#job-count").textContent = jobs.length ? String(jobs.length) : "";
    $("#jobs-empty").hidden = jobs.length > 0;
    const rows = jobs.map((job) => {
      let row = this.rows.get(job.id);
      if (!row) {
        row = this.makeRow(job);
        this.rows.set(job.id, row);
      }
      this.updateRow(job);
      return row;
    });
    if (rows.length !== list.children.length || rows.some((r, i) => list.children[i] !== r)) list.replaceChildren(...rows);
  }

  makeRow(job) {
    const row = h("li.job-row", { tabindex: 0, role: "button", dataset: { id: job.id } },
      h("div.thumb", job.stream ? icon("radio") : icon("film")),
      h("div.row-main",
        h("p.row-prompt"),
        h("p.row-meta"),
        h("div.bar.bar-sm", h("div.bar-fill"))),
      h("div.row-side"));
    row.addEventListener("click", () => this.select(job.id));
    row.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        this.select(job.id);
      }
    });
    return row;
  }

  updateRow(job) {
    const row = this.rows.get(job.id);
    if (!row) return;
    row.classList.toggle("selected", job.id === this.selected);
    row.setAttribute("aria-current", job.id === this.selected ? "true" : "false");
    row.dataset.status = job.status;
    $(".row-prompt", row).textContent = job.prompt;
    $(".row-prompt", row).title = job.prompt;
    const kind = job.stream ? "live stream" : job.extended_from_video_id ? "extension" : null;
    $(".row-meta", row).textContent = [job.model, `${job.seconds} s`, job.size, kind, ago(job.created_at)].filter(Boolean).join(" · ");
    const bar = $(".bar", row);
    bar.hidden = !active(job);
    $(".bar-fill", bar).style.width = `${job.progress || 0}%`;
    bar.classList.toggle("indeterminate", job.status === "queued");
    const side = $(".row-side", row);
    const pct = active(job) && job.status !== "queued" ? h("span.row-pct", `${job.progress || 0}%`) : null;
    side.replaceChildren(statusPill(job.status, !!job.stream), pct || "");
    if (job.status === "completed") this.thumbnail(job, $(".thumb", row));
  }

  async thumbnail(job, box) {
    if (box.querySelector("img")) return;
    const url = await this.mediaUrl(job.id, "thumbnail");
    if (url && !box.querySelector("img")) box.replaceChildren(h("img", { src: url, alt: "" }));
  }

  /** An object URL of a finished job's file (fetched once with the key), or null when it has none. */
  async mediaUrl(id, variant) {
    const cache = this.media.get(id) || {};
    this.media.set(id, cache);
    if (variant in cache) return cache[variant];
    cache[variant] = (async () => {
      try {
        const blob = await this.api.blob(`/v1/videos/${id}/content?variant=${variant}`);
        return URL.createObjectURL(blob);
      } catch {
        return null;
      }
    })();
    cache[variant] = await cache[variant];
    return cache[variant];
  }

  // -- detail ----------------------------------------------------------------------------------
  select(id) {
    this.selected = id;
    for (const [rid, row] of this.rows) {
      row.classList.toggle("selected", rid === id);
      row.setAttribute("aria-current", rid === id ? "true" : "false");
    }
    this.renderList();
    this.ensureWatchers();
    this.renderDetail();
    if (window.matchMedia("(max-width: 980px)").matches) $("#detail").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  renderDetail() {
    const box = $("#detail");
    const job = this.jobs.get(this.selected);
    const key = job ? `${job.id}:${active(job) ? "active" : job.status}` : "";
    if (key !== this.detailKey) {
      this.detailKey = key;
      if (this.live) {
        this.live.stop();
        this.live = null;
      }
      box.replaceChildren(...(job ? this.buildDetail(job) : this.emptyDetail()));
      box.dataset.id = job ? job.id : "";
    }
    if (job) this.updateDetail(job);
  }

  emptyDetail() {
    return [h("div.empty-detail",
      h("img", { src: "/console/logo.svg", alt: "", width: 56, height: 56 }),
      h("h2", "Make a video"),
      h("p.muted", "Describe it on the left and press Generate. Progress shows here live, segment by segment; the finished video plays right here."),
      h("ul.tips",
        h("li", h("strong", "Multi-shot"), " cuts between prompts on one timeline."),
        h("li", h("strong", "Extend"), " continues a finished video without a jump."),
        h("li", h("strong", "Live stream"), " shows frames as they are made; switch its prompt while it runs.")))];
  }

  buildDetail(job) {
    const copy = h("button.btn.btn-icon.btn-sm", { type: "button", title: "Copy id", onclick: () => {
      navigator.clipboard?.writeText(job.id).then(() => toast("Id copied", "ok"), () => {});
    } }, icon("copy"));
    const parts = [
      h("div.detail-head",
        h("div.detail-title", h("h2.detail-prompt", job.prompt), h("div.detail-status")),
        h("dl.meta-grid",
          h("div", h("dt", "Model"), h("dd", job.model)),
          h("div", h("dt", "Size"), h("dd", job.size)),
          h("div", h("dt", "Length"), h("dd", `${job.seconds} s`)),
          h("div", h("dt", "Created"), h("dd", { title: new Date(job.created_at * 1000).toLocaleString() }, ago(job.created_at))),
          h("div", h("dt", "Render time"), h("dd.render-time", "—")),
          h("div.meta-id", h("dt", "Id"), h("dd", h("code", job.id), copy)),
          job.extended_from_video_id ? h("div.meta-id", h("dt", "Extends"), h("dd", this.jobLink(job.extended_from_video_id))) : null)),
    ];
    if (active(job)) {
      if (job.stream) parts.push(this.buildLive(job));
      parts.push(this.buildProgress(job));
    } else if (job.status === "completed") {
      parts.push(this.buildResult(job));
    } else if (job.status === "failed") {
      const e = job.error || {};
      parts.push(h("div.callout.callout-error", icon("alert"), h("div", h("strong", `Failed${e.code ? ` (${e.code})` : ""}`), h("p", e.message || "The job failed."), e.param ? h("p.muted.small", `Field: ${e.param}`) : null)));
    } else if (job.status === "cancelled") {
      parts.push(h("div.callout.callout-muted", icon("stop"), h("div", h("strong", "Cancelled"), h("p.cancel-note"))));
    }
    parts.push(this.buildActions(job));
    parts.push(h("details.activity", { open: true }, h("summary", "Activity"), h("ol.log")));
    return parts;
  }

  /** A button that opens another job of the list (an extension's source). */
  jobLink(id) {
    const source = this.jobs.get(id);
    const label = source ? source.prompt : id;
    return h("button.link", { type: "button", title: id, onclick: () => this.jobs.has(id) && this.select(id), disabled: !source }, label);
  }

  buildProgress(job) {
    return h("div.progress-block", { dataset: { progress: String(job.progress || 0) } },
      h("div.progress-head", h("span.pct"), h("span.progress-text"), h("span.eta.muted")),
      h("div.bar", h("div.bar-fill")),
      job.stream ? null : h("div.segments", { "aria-hidden": "true" }),
      h("p.retry-note", { hidden: true }));
  }

  buildLive(job) {
    this.live = new LiveView(this.api, job);
    this.live.start();
    const input = h("input#live-prompt", { name: "prompt", placeholder: "Switch to a new prompt…", autocomplete: "off" });
    const form = h("form.live-controls", { novalidate: true },
      h("div.form-error", { role: "alert", hidden: true }),
      h("div.field", { dataset: { param: "prompt" } },
        h("label", { for: "live-prompt" }, "Switch the prompt (applied at the next chunk)"),
        h("div.input-row", input, h("button.btn.btn-soft", { type: "submit" }, icon("send"), "Switch")),
        h("p.field-error", { role: "alert" })));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      clearErrors(form);
      try {
        await this.api.post(`/v1/videos/${job.id}/prompt`, { prompt: input.value });
        toast("Prompt switch requested: it shows from the next chunk.", "ok");
        input.value = "";
      } catch (err) {
        if (err instanceof ApiError) showError(form, err);
      }
    });
    return h("div.live",
      this.live.el,
      h("p.now-showing", h("span.muted", "Now showing "), h("strong.now-prompt", (job.stream && job.stream.prompt) || job.prompt)),
      form);
  }

  buildResult(job) {
    const video = h("video.player", { controls: true, loop: true, muted: true, autoplay: true, playsInline: true, preload: "auto" });
    const [w, hgt] = job.size.split("x").map(Number);
    video.style.aspectRatio = `${w} / ${hgt}`;
    video.classList.toggle("pixelated", Math.max(w, hgt) < 320);
    const downloads = h("div.downloads", h("span.muted.small", "Download"));
    const plot = h("figure.drift-plot", { hidden: true }, h("img", { alt: "Drift plot: colour statistics per segment" }), h("figcaption.muted.small", "Colour drift across the video (from the drift report)"));
    for (const [variant, info] of Object.entries(VARIANTS)) {
      const link = h("a.btn.btn-soft.btn-sm.dl", { dataset: { variant }, download: `${job.id}.${info.ext}`, hidden: true }, icon("download"), info.label);
      downloads.append(link);
      this.mediaUrl(job.id, variant).then((url) => {
        if (!url) return;
        link.href = url;
        link.hidden = false;
        if (variant === "video") video.src = url;
        if (variant === "drift_plot") {
          $("img", plot).src = url;
          plot.hidden = false;
        }
      });
    }
    return h("div.result", h("div.player-wrap", video), this.buildProgress(job), downloads, plot);
  }

  buildActions(job) {
    const bar = h("div.detail-actions");
    if (active(job)) {
      const cancel = h("button.btn.btn-danger#cancel", { type: "button" }, icon("stop"), job.stream ? "Stop stream" : "Cancel");
      cancel.addEventListener("click", async () => {
        cancel.disabled = true;
        cancel.lastChild.textContent = job.stream ? "Stopping…" : "Cancelling…";
        try {
          this.merge(await this.api.post(`/v1/videos/${job.id}/cancel`, {}));
          this.changed(job.id);
        } catch (err) {
          toast(err.message, "error");
          cancel.disabled = false;
        }
      });
      bar.append(cancel);
    }
    if (job.status === "completed" && !job.stream) {
      bar.append(h("button.btn.btn-soft", { type: "button", onclick: () => this.onExtend(job) }, icon("extend"), "Extend"));
    }
    const del = h("button.btn.btn-ghost.btn-delete", { type: "button" }, icon("trash"), "Delete");
    let armed = null;
    del.addEventListener("click", async () => {
      if (!armed) {
        del.classList.add("armed");
        del.lastChild.textContent = "Click again to delete";
        armed = setTimeout(() => {
          armed = null;
          del.classList.remove("armed");
          del.lastChild.textContent = "Delete";
        }, 3500);
        return;
      }
      clearTimeout(armed);
      try {
        await this.api.del(`/v1/videos/${job.id}`);
        toast("Deleted.", "ok");
        this.forget(job.id);
        this.order = this.order.filter((id) => id !== job.id);
        this.selected = this.order[0] || null;
        this.renderList();
        this.renderDetail();
        this.onJobsChanged(this.list());
      } catch (err) {
        toast(err.message, "error");
      }
    });
    bar.append(h("span.spacer"), del);
    return bar;
  }

  updateDetail(job) {
    const box = $("#detail");
    $(".detail-status", box).replaceChildren(statusPill(job.status, !!job.stream), job.retries_used ? h("span.pill.pill-retry", `${job.retries_used} retr${job.retries_used === 1 ? "y" : "ies"}`) : "");
    const took = job.started_at && job.completed_at ? duration(job.completed_at - job.started_at) : job.started_at && active(job) ? `${duration(Date.now() / 1000 - job.started_at)} so far` : "—";
    $(".render-time", box).textContent = took;
    const block = $(".progress-block", box);
    if (block) this.updateProgress(job, block);
    if (this.live) $(".now-prompt", box).textContent = (job.stream && job.stream.prompt) || job.prompt;
    const note = $(".cancel-note", box);
    if (note) {
      note.textContent = job.steps_total
        ? `Stopped after ${job.segments_done} of ${job.segments_total} ${job.stream ? "chunks" : "segments"} (${job.progress || 0}%).`
        : "Stopped before it started.";
    }
    const log = $(".log", box);
    const entries = this.logs.get(job.id) || [];
    if (log && log.childElementCount !== entries.length) {
      log.replaceChildren(...entries.slice().reverse().map((e) => h(`li.log-${e.kind}`, h("time", clock(e.time)), h("span", e.text))));
    }
    if (log) log.closest("details").hidden = entries.length === 0;
  }

  updateProgress(job, block) {
    const pct = job.progress || 0;
    block.dataset.progress = String(pct);
    block.dataset.status = job.status;
    $(".pct", block).textContent = job.status === "queued" ? "Queued" : `${pct}%`;
    $(".bar", block).classList.toggle("indeterminate", job.status === "queued");
    $(".bar-fill", block).style.width = `${pct}%`;
    let text = "";
    if (job.status === "queued") {
      text = "Waiting for a worker…";
    } else if (job.status === "completed") {
      const unit = job.stream ? "chunk" : "segment";
      text = `${job.segments_total} ${unit}${job.segments_total === 1 ? "" : "s"} · ${job.steps_total} ${job.stream ? "frames" : "denoising steps"}`;
    } else if (job.stream) {
      const s = job.stream;
      text = `${s.frames_done ?? job.steps_done} of ${s.frames_total ?? job.steps_total} frames · chunk ${Math.min((s.chunks_done ?? job.segments_done) + 1, job.segments_total)} of ${job.segments_total}`;
    } else if (job.segments_total) {
      const current = Math.min(job._segment ?? job.segments_done, job.segments_total - 1);
      const perSegment = job._steps || Math.round(job.steps_total / job.segments_total) || 0;
      text = `Segment ${current + 1} of ${job.segments_total}`;
      if (job._step) text += ` · step ${job._step} of ${perSegment}`;
    }
    $(".progress-text", block).textContent = text;
    let eta = "";
    if (job.status === "in_progress" && job.started_at && pct >= 3 && pct < 100) {
      const elapsed = Date.now() / 1000 - job.started_at;
      eta = `about ${duration((elapsed * (100 - pct)) / pct)} left`;
    }
    $(".eta", block).textContent = eta;
    const cells = $(".segments", block);
    if (cells && job.segments_total) {
      const retried = new Set((job.segment_retries || []).map((r) => r.segment));
      if (cells.childElementCount !== job.segments_total) {
        cells.replaceChildren(...Array.from({ length: job.segments_total }, (_, i) => h("span.seg", { title: `Segment ${i + 1}` }, h("span.seg-fill"))));
        cells.classList.toggle("dense", job.segments_total > 60);
      }
      const current = job._segment ?? job.segments_done;
      [...cells.children].forEach((cell, i) => {
        const done = i < job.segments_done;
        const running = !done && i === current && job.status === "in_progress";
        cell.classList.toggle("done", done);
        cell.classList.toggle("running", running);
        cell.classList.toggle("retried", retried.has(i));
        cell.firstChild.style.width = done ? "100%" : running && job._steps ? `${(100 * (job._step || 0)) / job._steps}%` : "0%";
      });
    }
    const note = $(".retry-note", block);
    const retries = job.segment_retries || [];
    note.hidden = !retries.length;
    if (retries.length) {
      const last = retries[retries.length - 1];
      note.replaceChildren(icon("alert"), ` ${retries.length} re-sampling${retries.length === 1 ? "" : "s"} by the health gate; last: ${job.stream ? "chunk" : "segment"} ${last.segment + 1} (${last.reasons.join(", ")}).`);
    }
  }
}
