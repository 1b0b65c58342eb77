// ipr-crawl dashboard: asks /api/crawl/<id> every refresh_secs and draws what it says.
// Read-only; every number is also shown as text (charts carry an aria-label).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const fmt = (n) => (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en");
  const charts = {};
  let refresh = 3, current = "";

  function showError(text) {
    const box = $("error");
    box.textContent = text;
    box.hidden = !text;
  }

  function cards(id, rows) {
    const dl = $(id);
    dl.replaceChildren(...rows.map(([label, value, key]) => {
      const div = document.createElement("div");
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = label; dd.textContent = value;
      if (key) dd.dataset.key = key;
      div.append(dt, dd);
      return div;
    }));
  }

  function rows(id, items, cells) {
    const body = $(id).tBodies[0];
    body.replaceChildren(...items.map((item) => {
      const tr = document.createElement("tr");
      for (const [text, cls] of cells(item)) {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.append(td);
      }
      return tr;
    }));
  }

  function chart(id, title, xlabel, series, data, label) {
    const el = $(id);
    el.setAttribute("aria-label", label);
    const width = Math.max(300, el.clientWidth || 500);
    if (!data[0].length) { el.textContent = "no samples yet"; if (charts[id]) { charts[id].destroy(); delete charts[id]; } return; }
    if (charts[id] && charts[id].series.length === series.length + 1) {
      charts[id].setData(data);
      return;
    }
    if (charts[id]) charts[id].destroy();
    el.textContent = "";
    charts[id] = new uPlot({
      title, width, height: 220,
      scales: { x: { time: false } },
      axes: [{ label: xlabel }, {}],
      series: [{ label: xlabel }, ...series],
    }, data, el);
  }

  function draw(s) {
    $("ordering").textContent = `ordered by ${s.ordering}` + (s.finished ? ", finished" : "") +
      (s.buckets > 1 ? `, ${s.buckets} buckets` : "");
    if (s.buckets_missing && s.buckets_missing.length) showError(`buckets that cannot be read now: ${s.buckets_missing.join(", ")}`);
    cards("counts", [
      ["known", fmt(s.known), "known"], ["fetched", fmt(s.fetched), "fetched"], ["frontier", fmt(s.frontier), "frontier"],
      ["in flight", fmt(s.in_flight), "in_flight"], ["failed", fmt(s.failed), "failed"], ["forced", fmt(s.forced), "forced"],
      ["dead-lettered", fmt(s.dead_lettered), "dead_lettered"],
      ["pages/s (last minute)", s.pages_per_sec === null ? "–" : s.pages_per_sec.toFixed(1), "pages_per_sec"],
    ]);
    const c = s.curves || {}, tl = c.timeline || [];
    const fetched = tl.map((r) => r.fetched), share = tl.map((r) => r.pagerank_share);
    const last = tl.length ? tl[tl.length - 1] : null;
    const pct = (v) => `${(v * 100).toFixed(1)} %`;
    const prior = last && last.prior_share !== undefined;
    chart("chart-share", "PageRank share fetched", "pages fetched", [
      { label: "share of PageRank", stroke: "#2c6bd6", width: 2 },
      ...(prior ? [{ label: "share of the prior's mass", stroke: "#d08000", width: 2 }] : []),
    ], [fetched, share, ...(prior ? [tl.map((r) => r.prior_share ?? null)] : [])],
    last ? `PageRank share fetched: ${pct(last.pagerank_share)}` + (prior ? `, the prior's mass fetched: ${pct(last.prior_share)}` : "") +
      ` after ${fmt(last.fetched)} pages` : "no samples yet");
    const t = tl.map((r) => r.t);
    chart("chart-pages", "Pages", "seconds", [
      { label: "fetched", stroke: "#1e7b34" }, { label: "frontier", stroke: "#d08000" }, { label: "in flight", stroke: "#7b1fa2" },
    ], [t, fetched, tl.map((r) => r.frontier), tl.map((r) => r.in_flight)],
    last ? `${fmt(last.fetched)} fetched, ${fmt(last.frontier)} queued, ${fmt(last.in_flight)} in flight at ${Math.round(last.t)} s` : "no samples yet");
    chart("chart-rate", "Pages per minute", "seconds", [{ label: "pages/min", stroke: "#2c6bd6" }],
      [t, tl.map((r) => r.pages_per_min)], last ? `${fmt(last.pages_per_min)} pages per minute at the last sample` : "no samples yet");
    const now = s.time;
    rows("holders", s.holders, (h) => [
      [h.holder || "(leases without a holder)", "url"], [h.host || ""], [h.pid === null || h.pid === undefined ? "" : String(h.pid)],
      [h.gone === "closed" ? "closed" : h.gone === "lost" ? "heartbeat lost, leases handed back"
        : h.alive ? (h.late ? "heartbeat late" : "alive") : "heartbeat lost", h.alive && !h.late || h.gone === "closed" ? "alive" : "lost"],
      [h.beat_age_secs === null ? "–" : `${h.beat_age_secs} s ago`, "num"], [fmt(h.in_flight), "num"],
    ]);
    rows("top", s.top, (r) => [[r.url || "", "url"], [r.score === null ? "–" : Number(r.score).toPrecision(4), "num"],
      [r.depth === null || r.depth === undefined ? "–" : String(r.depth), "num"]]);
    $("host-sample").textContent = "200";
    const secs = (v) => (v === null || v === undefined ? "–" : `${v} s`);
    rows("hosts", s.hosts, (h) => [[h.host], [fmt(h.queued_in_top), "num"], [fmt(h.in_flight), "num"],
      [fmt(h.waiting), "num"], [secs(h.delay), "num"], [h.last_fetch_age === null ? "–" : `${h.last_fetch_age} s ago`, "num"]]);
    const rv = s.revisits;
    cards("revisits", [["due now", fmt(rv.due), "revisits_due"], ["scheduled", fmt(rv.scheduled), "revisits_scheduled"],
      ...rv.by_day.map((n, d) => [`day ${d + 1}`, fmt(n)])]);
    const days = (c.revisits || []);
    chart("chart-revisits", "Changes found and accesses per day", "day", [
      { label: "accesses", stroke: "#888" }, { label: "changes found", stroke: "#b3261e" },
    ], [days.map((d) => d.day), days.map((d) => d.accesses), days.map((d) => d.changed)],
    days.length ? `${days.length} days of revisits` : "no revisits recorded");
    const m = s.redis.memory || {};
    cards("redis", [["round trip", s.redis.rtt_ms === null ? "no answer" : `${s.redis.rtt_ms} ms`, "rtt_ms"], ["memory used", fmt(m.used) + " B", "memory_used"],
      ["max memory", m.max ? fmt(m.max) + " B" : "no limit", "memory_max"], ["the crawl's keys", m.crawl === null || m.crawl === undefined ? "unknown" : fmt(m.crawl) + " B", "memory_crawl"],
      ["eviction policy", m.policy || "–"]]);
  }

  async function ask(path) {
    const reply = await fetch(path, { cache: "no-store", credentials: "same-origin" });
    const data = await reply.json().catch(() => ({ error: `HTTP ${reply.status}` }));
    if (!reply.ok || data.error) throw new Error(data.error || `HTTP ${reply.status}`);
    return data;
  }

  async function tick() {
    try {
      if (!current) {
        const list = await ask("api/crawls");
        refresh = list.refresh_secs || refresh;
        $("where").textContent = list.where;
        const select = $("crawl");
        select.replaceChildren(...list.crawls.map((id) => new Option(id, id)));
        const wanted = new URLSearchParams(location.search).get("crawl");
        current = list.crawls.includes(wanted) ? wanted : (list.crawls[0] || "");
        select.value = current;
        if (!current) throw new Error(`no crawl in ${list.where} yet`);
      }
      const snap = await ask(`api/crawl/${encodeURIComponent(current)}`);
      showError("");
      $("main").hidden = false;
      draw(snap);
      $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      document.body.dataset.fetched = String(snap.fetched);
    } catch (err) {
      showError(String(err.message || err));
      $("updated").textContent = `failed ${new Date().toLocaleTimeString()}; retrying every ${refresh} s`;
    }
    setTimeout(tick, refresh * 1000);
  }

  $("crawl").addEventListener("change", (e) => { current = e.target.value; });
  tick();
})();
