// The dashboard's pages (gateway/ui/templates) as Alpine.js components. Every figure comes from
// /ui/api (gateway/ui/api.py) or a job's event stream; text from jobs is shown with x-text only.
"use strict";

async function api(path, options) {
  const opts = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
  if (opts.body !== undefined && typeof opts.body !== "string") {
    opts.body = JSON.stringify(opts.body);
    opts.headers["Content-Type"] = "application/json";
  }
  const r = await fetch(path, opts);
  if (r.status === 401 && !path.startsWith("/ui/login")) {
    location.assign("/ui/login");
    throw new Error("signed out");
  }
  if (r.status === 204) return null;
  const body = await r.json().catch(() => null);
  if (!r.ok) {
    const msg = body && body.error ? body.error.message : "HTTP " + r.status;
    throw new Error(msg);
  }
  return body;
}

function fmt(x) {
  if (x === undefined || x === null || Number.isNaN(x)) return "—";
  return x >= 100 ? x.toFixed(0) : x.toFixed(1);
}
function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}
function ms(x) {
  if (x === undefined || x === null) return "";
  return x >= 1000 ? (x / 1000).toFixed(2) + " s" : Math.round(x) + " ms";
}
function secs(x) {
  return (x / 1000).toFixed(1) + " s";
}
const helpers = { fmt, when, ms, secs };

document.addEventListener("alpine:init", () => {
  const Alpine = window.Alpine;
  Alpine.store("session", { me: null });
  if (document.body.dataset.page !== "login") {
    api("/ui/api/me").then((me) => (Alpine.store("session").me = me)).catch(() => {});
  }
  Alpine.data("session", () => ({
    async signOut() {
      await api("/ui/logout", { method: "POST" });
      location.assign("/ui/login");
    },
  }));

  Alpine.data("login", () => ({
    key: "",
    error: "",
    busy: false,
    async init() {
      const me = await fetch("/ui/api/me", { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : null));
      if (me && me.open) this.error = "This gateway is in open mode: no sign-in is needed.";
    },
    async submit() {
      this.busy = true;
      this.error = "";
      try {
        await api("/ui/login", { method: "POST", body: { key: this.key } });
        this.key = "";
        location.assign("/ui");
      } catch (e) {
        this.error = e.message;
      } finally {
        this.busy = false;
      }
    },
  }));

  Alpine.data("overview", () => ({
    ...helpers,
    data: { models: [], workers: [], services: [], mcp: [] },
    rates: {},
    error: "",
    history: [], // [{t, tokens: {model: tps}, jobs: {model: jobs/s}}]
    charts: {},
    last: null,
    timer: null,
    init() {
      this.poll();
      this.timer = setInterval(() => this.poll(), 2000);
    },
    destroy() {
      clearInterval(this.timer);
    },
    cacheHits(w) {
      if (!w.prompt_tokens) return "—";
      return Math.round((100 * w.cached_tokens) / w.prompt_tokens) + "% of " + w.prompt_tokens + " prompt tokens";
    },
    async poll() {
      try {
        const d = await api("/ui/api/overview");
        const rates = {};
        if (this.last) {
          const dt = (d.now_ms - this.last.now_ms) / 1000;
          for (const m of d.models) {
            const before = this.last.models.find((x) => x.id === m.id);
            if (before && dt > 0) rates[m.id] = Math.max(0, m.jobs_finished - before.jobs_finished) / dt;
          }
        }
        this.last = d;
        this.rates = rates;
        this.data = d;
        this.error = "";
        this.history.push({
          t: d.now_ms / 1000,
          tokens: Object.fromEntries(d.models.map((m) => [m.id, m.decode_tps])),
          jobs: rates,
        });
        if (this.history.length > 150) this.history.shift();
        this.draw("tokens");
        this.draw("jobs");
      } catch (e) {
        this.error = e.message;
      }
    },
    draw(what) {
      const el = this.$refs[what];
      if (!el || !window.uPlot) return;
      const models = this.data.models.map((m) => m.id);
      const data = [this.history.map((h) => h.t)];
      for (const m of models) data.push(this.history.map((h) => (h[what][m] === undefined ? null : h[what][m])));
      const key = models.join("\u0000");
      let chart = this.charts[what];
      if (!chart || chart.key !== key) {
        if (chart) chart.plot.destroy();
        const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
        const opts = {
          width: Math.max(240, el.clientWidth || 300),
          height: 160,
          legend: { show: models.length > 0 },
          // the last five minutes, from the first reading on (one point would stretch the axis over years)
          scales: { x: { time: true, range: (u, min, max) => [max - 300, max] } },
          series: [{}, ...models.map((m, i) => ({ label: m, stroke: palette[i % palette.length], width: 2 }))],
          axes: [{}, { size: 40 }],
        };
        chart = { key, plot: new window.uPlot(opts, data, el) };
        this.charts[what] = chart;
      } else {
        chart.plot.setSize({ width: Math.max(240, el.clientWidth || 300), height: 160 });
        chart.plot.setData(data);
      }
    },
  }));

  Alpine.data("jobs", () => ({
    ...helpers,
    statuses: ["queued", "running", "requires_action", "succeeded", "failed", "cancelled"],
    q: "",
    status: "",
    model: "",
    tenant: "",
    quarantined: false, // only jobs quarantined after lost attempts (store/quarantine.py)
    list: [],
    next: null,
    error: "",
    timer: null,
    init() {
      const p = new URLSearchParams(location.search);
      for (const k of ["q", "status", "model", "tenant"]) if (p.get(k)) this[k] = p.get(k);
      this.quarantined = p.get("quarantined") === "true";
      this.load();
      this.timer = setInterval(() => {
        if (!this.next || this.list.length <= 50) this.load();
      }, 3000);
    },
    destroy() {
      clearInterval(this.timer);
    },
    params(cursor) {
      const p = new URLSearchParams();
      for (const k of ["q", "status", "model", "tenant"]) if (this[k].trim()) p.set(k, this[k].trim());
      if (this.quarantined) p.set("quarantined", "true");
      if (cursor) p.set("cursor", cursor);
      return p;
    },
    async load() {
      try {
        const page = await api("/ui/api/jobs?" + this.params());
        this.list = page.jobs;
        this.next = page.next_cursor;
        this.error = "";
      } catch (e) {
        this.error = e.message;
        this.list = [];
      }
    },
    async more() {
      try {
        const page = await api("/ui/api/jobs?" + this.params(this.next));
        this.list = this.list.concat(page.jobs);
        this.next = page.next_cursor;
      } catch (e) {
        this.error = e.message;
      }
    },
  }));

  Alpine.data("job", () => ({
    ...helpers,
    id: "",
    d: null,
    error: "",
    timeline: [],
    live: false,
    source: null,
    refreshing: null,
    init() {
      this.id = this.$el.dataset.jobId;
      this.refresh();
      this.follow();
    },
    destroy() {
      if (this.source) this.source.close();
    },
    async refresh() {
      try {
        this.d = await api("/ui/api/jobs/" + encodeURIComponent(this.id));
        this.error = "";
      } catch (e) {
        this.error = e.message;
      }
    },
    soon() {
      // many events in a burst: one re-read of the record, waterfall and transcript
      if (this.refreshing) return;
      this.refreshing = setTimeout(() => {
        this.refreshing = null;
        this.refresh();
      }, 150);
    },
    follow() {
      const src = new EventSource("/ui/api/jobs/" + encodeURIComponent(this.id) + "/events");
      this.source = src;
      src.onopen = () => (this.live = true);
      src.onerror = () => {
        this.live = false;
        if (this.d && this.d.terminal) src.close();
      };
      for (const type of ["queued", "started", "token", "tool_call", "tool_result", "requires_action", "final", "error", "cancelled"]) {
        src.addEventListener(type, (m) => this.onEvent(JSON.parse(m.data)));
      }
    },
    onEvent(ev) {
      const d = ev.data || {};
      const add = (title, meta, body) =>
        this.timeline.push({ key: ev.seq, type: ev.type, title, meta: meta || "", body: body || "" });
      switch (ev.type) {
        case "queued":
          add(d.resumed ? "queued again" : "queued", d.model ? "model " + d.model : "attempt " + d.attempt);
          break;
        case "started":
          add("started", "on " + d.worker + (d.attempt > 1 ? " · attempt " + d.attempt : ""));
          break;
        case "token": {
          const text = d.content !== undefined && d.content !== null ? d.content : d.text;
          const last = this.timeline[this.timeline.length - 1];
          if (last && last.type === "token") last.body += text || "";
          else if (text) add("tokens", "streamed", text); // a call being written shows as its call
          break;
        }
        case "tool_call":
          add(
            "call " + d.name,
            "round " + d.iteration + " · runs on " + d.where + (d.awaiting ? " · waits on " + d.awaiting : ""),
            JSON.stringify(d.arguments, null, 2)
          );
          break;
        case "tool_result":
          add(
            "result of " + d.name + (d.ok ? "" : " (failed)"),
            "ran on " + d.where + (d.duration_ms !== undefined && d.duration_ms !== null ? " · " + ms(d.duration_ms) : "") +
              (d.executed === false ? " · from before a resume" : ""),
            d.error ? d.error + "\n" + d.content : d.content
          );
          break;
        case "requires_action":
          add("paused", "waiting on " + (d.calls || []).map((c) => c.name + " (" + c.kind + ")").join(", "));
          break;
        case "final":
          add("final answer", d.finish_reason + " · " + d.iterations + " round(s)", d.content || "");
          break;
        case "error":
          add("error " + d.code, "", d.message);
          break;
        case "cancelled":
          add("cancelled", d.reason);
          break;
      }
      if (ev.type !== "token") this.soon();
      if (["final", "error", "cancelled"].includes(ev.type)) {
        this.live = false;
        if (this.source) this.source.close();
      }
    },
    async cancel() {
      try {
        await api("/ui/api/jobs/" + encodeURIComponent(this.id) + "/cancel", { method: "POST" });
        this.refresh();
      } catch (e) {
        this.error = e.message;
      }
    },
    barStyle(s) {
      const total = Math.max(1, ...this.d.waterfall.map((x) => x.end_ms));
      const left = (100 * s.start_ms) / total;
      const width = Math.max(0.5, (100 * (s.end_ms - s.start_ms)) / total);
      return "margin-left:" + left.toFixed(2) + "%;width:" + width.toFixed(2) + "%";
    },
    callText(c) {
      const f = c.function || {};
      return f.name + "(" + (typeof f.arguments === "string" ? f.arguments : JSON.stringify(f.arguments)) + ")";
    },
  }));

  Alpine.data("approvals", () => ({
    ...helpers,
    items: [],
    reasons: {},
    results: {},
    error: "",
    timer: null,
    init() {
      this.load();
      this.timer = setInterval(() => this.load(), 2000);
    },
    destroy() {
      clearInterval(this.timer);
    },
    async load() {
      try {
        this.items = await api("/ui/api/approvals");
        this.error = "";
      } catch (e) {
        this.error = e.message;
      }
    },
    async decide(a, c, approved) {
      const body = [{ tool_call_id: c.id, approved }];
      if (this.reasons[c.id]) body[0].reason = this.reasons[c.id];
      await this.post(a, "approvals", body);
    },
    async answer(a, c) {
      await this.post(a, "tool_results", [{ tool_call_id: c.id, content: this.results[c.id] || "" }]);
    },
    async post(a, what, body) {
      try {
        await api("/ui/api/jobs/" + encodeURIComponent(a.job.job_id) + "/" + what, { method: "POST", body });
        this.error = "";
      } catch (e) {
        this.error = e.message;
      }
      this.load();
    },
  }));

  Alpine.data("batches", () => ({
    ...helpers,
    items: [],
    shown: null,
    error: "",
    timer: null,
    init() {
      this.load();
      this.timer = setInterval(() => this.load(), 2000);
    },
    destroy() {
      clearInterval(this.timer);
    },
    pct(b) {
      const c = b.request_counts;
      return c.total ? Math.round((100 * (c.completed + c.failed)) / c.total) : 100;
    },
    async load() {
      try {
        this.items = await api("/ui/api/batches");
        if (this.shown) await this.open(this.shown.batch);
        this.error = "";
      } catch (e) {
        this.error = e.message;
      }
    },
    async open(b) {
      try {
        this.shown = await api("/ui/api/batches/" + encodeURIComponent(b.id));
      } catch (e) {
        this.error = e.message;
      }
    },
  }));
});
