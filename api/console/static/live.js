// A live stream's viewer: JPEG frames arrive over the stream's WebSocket as the worker makes them
// (a chunk at a time) and are drawn on a canvas at the stream's fps; a viewer that falls behind
// skips ahead rather than lag.

import { h } from "./dom.js";

export class LiveView {
  constructor(api, job, { onMessage } = {}) {
    this.api = api;
    this.job = job;
    this.onMessage = onMessage || (() => {});
    this.fps = (job.stream && job.stream.fps) || 16;
    this.queue = [];
    this.shown = 0;
    this.nextIndex = null;
    this.total = (job.stream && job.stream.frames_total) || null;
    this.closed = false;
    this.canvas = h("canvas.live-canvas", { width: 64, height: 64, "aria-label": "Live frames" });
    const [w, hgt] = (job.size || "64x64").split("x").map(Number);
    this.canvas.width = w;
    this.canvas.height = hgt;
    this.canvas.classList.toggle("pixelated", Math.max(w, hgt) < 320);
    this.counter = h("span.live-counter", "waiting for the first frame…");
    this.badge = h("span.live-badge", h("span.dot"), "LIVE");
    this.el = h("div.live-stage", { dataset: { frames: "0" } }, this.canvas, this.badge, this.counter);
    this.el.style.aspectRatio = `${w} / ${hgt}`;
  }

  start() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    // A browser's WebSocket cannot send headers: the API takes the key as ?api_key= here.
    const query = this.api.key ? `?api_key=${encodeURIComponent(this.api.key)}` : "";
    this.ws = new WebSocket(`${scheme}://${location.host}/v1/videos/${this.job.id}/stream/ws${query}`);
    this.ws.binaryType = "blob";
    this.ws.onmessage = (e) => {
      if (typeof e.data === "string") {
        const msg = JSON.parse(e.data);
        if (msg.type === "chunk") {
          if (msg.fps) this.fps = msg.fps;
          this.nextIndex = msg.first_frame;
        }
        this.onMessage(msg);
      } else {
        this.queue.push({ blob: e.data, index: this.nextIndex });
        if (this.nextIndex !== null) this.nextIndex += 1;
      }
    };
    this.ws.onclose = () => {
      this.wsClosed = true;
    };
    this.timer = setInterval(() => this.tick(), 1000 / Math.min(60, Math.max(1, this.fps)));
  }

  async tick() {
    if (this.drawing || !this.queue.length) {
      if (this.wsClosed && !this.queue.length && !this.drawing && this.shown) this.badge.classList.add("ended");
      return;
    }
    // More than a second behind: drop to the newest half-second.
    if (this.queue.length > this.fps * 1.5) this.queue.splice(0, this.queue.length - Math.ceil(this.fps / 2));
    this.drawing = true;
    const { blob, index } = this.queue.shift();
    try {
      const bitmap = await createImageBitmap(blob);
      if (this.canvas.width !== bitmap.width || this.canvas.height !== bitmap.height) {
        this.canvas.width = bitmap.width;
        this.canvas.height = bitmap.height;
      }
      this.canvas.getContext("2d").drawImage(bitmap, 0, 0);
      bitmap.close();
      this.shown += 1;
      this.el.dataset.frames = String(this.shown);
      this.counter.textContent = index === null ? `${this.shown} frames` : `frame ${index + 1}${this.total ? ` / ${this.total}` : ""}`;
    } catch {
      // a frame that does not decode is skipped
    } finally {
      this.drawing = false;
    }
  }

  stop() {
    this.closed = true;
    clearInterval(this.timer);
    if (this.ws && this.ws.readyState <= 1) this.ws.close(1000);
  }
}
