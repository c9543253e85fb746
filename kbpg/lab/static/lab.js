// kbpg Retrieval Lab. Plain JavaScript, no build step. Every value from the database is
// put into the page as text (textContent), never as markup.
"use strict";

const $ = (sel) => document.querySelector(sel);
const CSRF = document.body.dataset.csrf;
const SVG = "http://www.w3.org/2000/svg";
const STAGES = [
  ["vector_score", "vector"], ["bm25_score", "full-text (BM25)"],
  ["fused_score", "fusion"], ["rerank_score", "rerank"],
];
const state = { kb: null, info: null, docs: [] };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message;
  box.hidden = !message;
}

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Kbpg-Lab": CSRF },
  };
  const res = await fetch(path, opts);
  const data = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) {
    const msg = data.error + (data.hint ? `\nhint: ${data.hint}` : "");
    showError(msg);
    throw new Error(msg);
  }
  showError("");
  return data;
}

function fmt(v, digits = 3) {
  if (v === null || v === undefined) return "–";
  return typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(digits)) : String(v);
}

// ------------------------------------------------------------------ knowledge bases

async function loadKbs() {
  const kbs = await api("/api/kbs");
  const select = $("#kb");
  select.replaceChildren(...kbs.map((k) => el("option", { value: k.name }, k.name)));
  const wanted = document.body.dataset.kb;
  if (wanted && kbs.some((k) => k.name === wanted)) select.value = wanted;
  if (!kbs.length) showError("No knowledge base you can read. Create one with kbpg kb create.");
  else await selectKb(select.value);
}

async function selectKb(name) {
  state.kb = name;
  state.info = await api(`/api/kb/${encodeURIComponent(name)}`);
  const readOnly = state.info.access !== "read_write";
  document.body.classList.toggle("readonly", readOnly);
  $("#kb-info").textContent =
    `${state.info.strategy} · ${state.info.indexing_config.embedding_model}` +
    (readOnly ? " · read-only" : "");
  CHOICES.method = state.info.methods;  // only what this KB serves
  buildFields($("#config-a .fields"), state.info.retrieval_config);
  buildFields($("#config-b .fields"), state.info.retrieval_config);
  $("#chunk-config").value = JSON.stringify(state.info.indexing_config, null, 2);
  await Promise.all([loadDocs(), loadSets()]);
}

// A field per retrieval_config key the KB reads (the server leaves out the rest).
const FIRST = ["method", "top_k", "fusion", "vector_weight", "rrf_k", "fusion_depth", "similarity_threshold",
  "rerank", "rerank_model", "candidate_count", "rerank_threshold", "filter", "ef_search", "bm25_k1", "bm25_b"];

// Settings with a fixed set of values: a select each.
const CHOICES = { method: ["hybrid", "vector", "full_text", "tree_search"], fusion: ["zscore", "rrf"] };

function buildFields(box, config) {
  box.replaceChildren();
  const order = (k) => (FIRST.includes(k) ? FIRST.indexOf(k) : FIRST.length);
  const keys = Object.keys(config).sort((x, y) => order(x) - order(y) || x.localeCompare(y));
  for (const key of keys) {
    const value = config[key];
    let input;
    if (typeof value === "boolean") {
      input = el("select", { name: key, "data-kind": "bool" },
        el("option", { value: "true" }, "true"), el("option", { value: "false" }, "false"));
      input.value = String(value);
    } else if (key in CHOICES) {
      input = el("select", { name: key, "data-kind": "text" },
        ...CHOICES[key].map((m) => el("option", { value: m }, m)));
      input.value = value;
    } else {
      const kind = typeof value === "number" ? "number" : (value !== null && typeof value === "object" ? "json" : "auto");
      input = el("input", { name: key, "data-kind": kind, value: value === null ? "" : (kind === "json" ? JSON.stringify(value) : String(value)) });
      if (value === null) input.placeholder = "(not set)";
    }
    box.append(el("label", {}, key, input));
  }
}

function readFields(box) {
  const out = {};
  for (const input of box.querySelectorAll("[name]")) {
    const raw = input.value.trim();
    if (raw === "") continue;
    const kind = input.dataset.kind;
    if (kind === "bool") out[input.name] = raw === "true";
    else if (kind === "number") out[input.name] = Number(raw);
    else if (kind === "json" || kind === "auto") {
      try { out[input.name] = JSON.parse(raw); } catch { out[input.name] = raw; }
    } else out[input.name] = raw;
  }
  return out;
}

const configA = () => readFields($("#config-a .fields"));
const configB = () => readFields($("#config-b .fields"));

// ------------------------------------------------------------------ search and A/B

function resultsTable(table, rows, other) {
  const head = el("tr", {}, el("th", {}, "#"), ...(other ? [el("th", {}, "move")] : []),
    el("th", {}, "source"), el("th", {}, "text"), el("th", {}, "vector"), el("th", {}, "BM25"),
    el("th", {}, "fusion"), el("th", {}, "rerank"), el("th", {}, "score"));
  const body = rows.map((r) => {
    let move = null;
    if (other) {
      const cls = r.move === "new" ? "new" : r.move > 0 ? "up" : r.move < 0 ? "down" : "";
      const text = r.move === "new" ? "new" : r.move > 0 ? `▲${r.move}` : r.move < 0 ? `▼${-r.move}` : "=";
      move = el("td", { class: cls }, text);
    }
    const stage = (rank, score) => el("td", { class: "num" }, rank ? `${rank} · ${fmt(score)}` : "–");
    return el("tr", { class: "result", "data-chunk": r.chunk_id },
      el("td", { class: "num" }, fmt(r.final_rank)), ...(move ? [move] : []),
      el("td", {}, r.source || r.title || ""),
      el("td", { class: "text" }, (r.content || "").slice(0, 400)),
      stage(r.vector_rank, r.vector_score), stage(r.bm25_rank, r.bm25_score),
      stage(r.fused_rank, r.fused_score), stage(r.rerank_rank, r.rerank_score),
      el("td", { class: "num" }, fmt(r.score)));
  });
  table.replaceChildren(head, ...body);
}

// Per-stage score distributions: one strip per stage, a dot per result.
function stageCharts(box, rows) {
  box.replaceChildren();
  for (const [key, label] of STAGES) {
    const values = rows.map((r) => r[key]).filter((v) => v !== null && v !== undefined);
    if (!values.length) continue;
    const lo = Math.min(...values), hi = Math.max(...values), span = hi - lo || 1;
    const w = 240, h = 46;
    const chart = svg("svg", { width: w, height: h, class: "stage-chart", "data-stage": key });
    chart.append(svg("line", { x1: 10, y1: 24, x2: w - 10, y2: 24, stroke: "#c3ccd6" }));
    values.forEach((v, i) => {
      const x = 10 + ((v - lo) / span) * (w - 20);
      chart.append(svg("circle", { cx: x, cy: 24, r: 5, fill: "#2d6cdf", "fill-opacity": 0.55 },
      ));
      chart.lastChild.append(svg("title", {}, `#${i + 1}: ${fmt(v)}`));
    });
    chart.append(svg("text", { x: 10, y: 42, "font-size": 10, fill: "#6b7785" }, fmt(lo)));
    chart.append(svg("text", { x: w - 10, y: 42, "font-size": 10, fill: "#6b7785", "text-anchor": "end" }, fmt(hi)));
    box.append(el("div", { class: "chart" }, el("h3", {}, `${label}: ${values.length} scored`), chart));
  }
}

// A/B rank shifts: A's ranks on the left, B's on the right, a line per shared result.
function rankShift(box, a, b) {
  box.replaceChildren();
  const n = Math.max(a.length, b.length);
  if (!n) return;
  const row = 22, h = n * row + 30, w = 300;
  const chart = svg("svg", { width: w, height: h, id: "rank-shift-chart" });
  chart.append(svg("text", { x: 40, y: 14, "font-size": 11, "text-anchor": "middle" }, "A"));
  chart.append(svg("text", { x: w - 40, y: 14, "font-size": 11, "text-anchor": "middle" }, "B"));
  const y = (rank) => 24 + (rank - 1) * row;
  for (const r of a) {
    chart.append(svg("text", { x: 40, y: y(r.final_rank) + 4, "font-size": 11, "text-anchor": "middle" }, String(r.final_rank)));
    if (r.other_rank) {
      const color = r.other_rank < r.final_rank ? "#0a7a32" : r.other_rank > r.final_rank ? "#b42318" : "#8896a5";
      chart.append(svg("line", { x1: 55, y1: y(r.final_rank), x2: w - 55, y2: y(r.other_rank), stroke: color, "stroke-width": 2, class: "shift" }));
    } else {
      chart.append(svg("line", { x1: 55, y1: y(r.final_rank), x2: 95, y2: y(r.final_rank), stroke: "#b42318", "stroke-dasharray": "3 3" }));
    }
  }
  for (const r of b) {
    chart.append(svg("text", { x: w - 40, y: y(r.final_rank) + 4, "font-size": 11, "text-anchor": "middle", fill: r.move === "new" ? "#1f5fbf" : "#1d232b" }, String(r.final_rank)));
  }
  box.append(el("div", { class: "chart" }, el("h3", {}, "rank shift A → B (dashed: only in A; blue: new in B)"), chart));
}

async function runSearch(ev) {
  ev.preventDefault();
  const query = $("#query").value;
  const ab = $("#ab-mode").checked;
  $("#ab-summary").replaceChildren();
  $("#rank-shift").replaceChildren();
  if (!ab) {
    const out = await api("/api/search", { kb: state.kb, query, config: configA() });
    resultsTable($("#results-a"), out.results, false);
    $("#results-b").hidden = true;
    stageCharts($("#stage-charts"), out.results);
    $("#search-note").textContent = out.note || `${out.results.length} results`;
  } else {
    const out = await api("/api/compare", { kb: state.kb, query, a: configA(), b: configB() });
    resultsTable($("#results-a"), out.a, false);
    resultsTable($("#results-b"), out.b, true);
    $("#results-b").hidden = false;
    stageCharts($("#stage-charts"), out.a);
    rankShift($("#rank-shift"), out.a, out.b);
    $("#ab-summary").replaceChildren(el("p", { id: "overlap" },
      `overlap@${out.k}: ${fmt(out.overlap, 2)} — A returned ${out.a.length}, B returned ${out.b.length}`));
    $("#search-note").textContent = "";
  }
}

// ------------------------------------------------------------------ confirmations

function confirmBox(title, body) {
  return new Promise((resolve) => {
    $("#modal-title").textContent = title;
    $("#modal-body").replaceChildren(body);
    $("#modal").hidden = false;
    const done = (ok) => { $("#modal").hidden = true; resolve(ok); };
    $("#modal-confirm").onclick = () => done(true);
    $("#modal-cancel").onclick = () => done(false);
  });
}

async function applyPreset(config) {
  const out = await api("/api/preset/diff", { kb: state.kb, config });
  if (!out.diff.length) {
    await confirmBox("Nothing to apply", el("p", {}, "The knowledge base already has these settings."));
    return;
  }
  const table = el("table", { class: "results", id: "preset-diff" },
    el("tr", {}, el("th", {}, "setting"), el("th", {}, "now"), el("th", {}, "after")),
    ...out.diff.map((d) => el("tr", {}, el("td", {}, d.field),
      el("td", {}, JSON.stringify(d.from)), el("td", {}, JSON.stringify(d.to)))));
  if (!(await confirmBox(`Apply to ${state.kb}'s retrieval_config?`, table))) return;
  const saved = await api("/api/preset/apply", { kb: state.kb, config });
  state.info.retrieval_config = saved.retrieval_config;
  $("#search-note").textContent = `Applied: ${out.diff.map((d) => d.field).join(", ")}`;
}

// ------------------------------------------------------------------ test sets

function metricBars(box, runs) {
  box.replaceChildren();
  const names = [["success_at_1", "Success@1"], ["success_at_5", "Success@5"], ["mrr_at_10", "MRR@10"], ["ndcg_at_10", "nDCG@10"]];
  const sides = Object.keys(runs);
  const colors = { a: "#2d6cdf", b: "#e07b1a" };
  const w = 420, row = 16 * sides.length + 10, h = names.length * row + 10;
  const chart = svg("svg", { width: w, height: h, id: "metric-chart" });
  names.forEach(([key, label], i) => {
    chart.append(svg("text", { x: 0, y: i * row + 14, "font-size": 11 }, label));
    sides.forEach((side, j) => {
      const v = Number(runs[side].metrics[key]);
      const y = i * row + 4 + j * 16;
      chart.append(svg("rect", { x: 80, y, width: Math.max(1, v * 280), height: 12, fill: colors[side], class: `bar-${side}` }));
      chart.append(svg("text", { x: 86 + v * 280, y: y + 10, "font-size": 10 }, `${side.toUpperCase()} ${fmt(v)}`));
    });
  });
  box.append(el("div", { class: "chart" }, el("h3", {}, "test-set metrics"), chart));
}

async function runSet(name) {
  const body = { kb: state.kb, test_set: name, a: configA() };
  if ($("#set-compare").checked) body.b = configB();
  const runs = await api("/api/test-sets/run", body);
  const lines = Object.entries(runs).map(([side, r]) => el("p", { class: "metrics", "data-side": side },
    `${side.toUpperCase()}: Success@1 ${fmt(r.metrics.success_at_1)} · Success@5 ${fmt(r.metrics.success_at_5)} · ` +
    `MRR@10 ${fmt(r.metrics.mrr_at_10)} · nDCG@10 ${fmt(r.metrics.ndcg_at_10)} · ${r.metrics.failed} of ${r.metrics.queries} missed the top 5`));
  $("#set-result").replaceChildren(el("h3", {}, `Test set ${name}`), ...lines);
  metricBars($("#metric-bars"), runs);
  // Every query: where its first expected item ranked under A (and B), misses first.
  const b = runs.b ? runs.b.queries : null;
  const rows = runs.a.queries.map((q, i) => ({ q, other: b ? b[i] : null }))
    .sort((x, y) => Number(x.q.success_at_5) - Number(y.q.success_at_5));
  const rank = (q) => (q && q.first_rank ? String(q.first_rank) : "miss");
  $("#failures").replaceChildren(
    el("tr", {}, el("th", {}, "query"), el("th", {}, "expected"), el("th", {}, "A rank"),
      ...(b ? [el("th", {}, "B rank")] : []), el("th", {}, "A's top results")),
    ...rows.map(({ q, other }) => {
      let cls = q.success_at_5 ? "query" : "query failure";
      const cells = [el("td", {}, q.query), el("td", {}, q.expected.join("; ")), el("td", { class: "num" }, rank(q))];
      if (b) {
        const better = other.first_rank && (!q.first_rank || other.first_rank < q.first_rank);
        const worse = q.first_rank && (!other.first_rank || other.first_rank > q.first_rank);
        cells.push(el("td", { class: `num ${better ? "up" : worse ? "down" : ""}` }, rank(other)));
        if (better || worse) cls += " changed";
      }
      cells.push(el("td", { class: "text" }, (q.top || []).join("\n")));
      return el("tr", { class: cls }, ...cells);
    }));
  await loadSets();
}

async function loadSets() {
  const sets = await api(`/api/kb/${encodeURIComponent(state.kb)}/test-sets`);
  $("#sets").replaceChildren(
    el("tr", {}, el("th", {}, "name"), el("th", {}, "queries"), el("th", {}, "runs"), el("th", {}, "last nDCG@10"), el("th", {}, "")),
    ...sets.map((s) => el("tr", { "data-set": s.name }, el("td", {}, s.name), el("td", { class: "num" }, fmt(s.queries)),
      el("td", { class: "num" }, fmt(s.runs)),
      el("td", { class: "num" }, s.last_metrics ? fmt(Number(s.last_metrics.ndcg_at_10)) : "–"),
      el("td", {}, el("button", { type: "button", class: "run-set", onclick: () => runSet(s.name) }, "Run"),
        " ", el("button", { type: "button", class: "write", onclick: async () => {
          if (await confirmBox(`Delete test set ${s.name}?`, el("p", {}, "Its queries and runs go too."))) {
            await api("/api/test-sets/delete", { kb: state.kb, name: s.name });
            await loadSets();
          }
        } }, "Delete")))));
}

// ------------------------------------------------------------------ chunking

async function previewChunks() {
  let config;
  try { config = JSON.parse($("#chunk-config").value); } catch (e) { showError(`indexing_config is not valid JSON: ${e.message}`); return; }
  const chunks = await api("/api/preview", { kb: state.kb, document: $("#chunk-doc").value || null, text: $("#chunk-text").value, indexing_config: config });
  const tokens = chunks.map((c) => c.token_count);
  $("#chunk-summary").textContent = `${chunks.length} chunks, ${tokens.length ? Math.min(...tokens) : 0}–${tokens.length ? Math.max(...tokens) : 0} tokens`;
  $("#chunk-list").replaceChildren(...chunks.map((c) => el("li", { class: "chunk" },
    el("div", { class: "meta" }, `#${c.ordinal} · ${c.token_count} tokens · ${(c.heading_path || []).join(" › ")}${c.page ? ` · p.${c.page}` : ""}`),
    c.content)));
}

async function rechunk() {
  let config;
  try { config = JSON.parse($("#chunk-config").value); } catch (e) { showError(`indexing_config is not valid JSON: ${e.message}`); return; }
  const body = el("p", {}, `Every document of ${state.kb} is indexed again with this indexing_config; the current index keeps serving until the new one is complete.`);
  if (!(await confirmBox(`Rechunk ${state.kb}?`, body))) return;
  await api("/api/rechunk", { kb: state.kb, indexing_config: config });
  watchProgress();
}

async function watchProgress() {
  const box = $("#rechunk-progress");
  for (;;) {
    const rows = await api(`/api/kb/${encodeURIComponent(state.kb)}/progress`);
    const top = rows[0];
    if (!top) return;
    const total = top.done + top.waiting + top.failed;
    const pct = total ? Math.round((100 * top.done) / total) : 100;
    box.replaceChildren(el("p", { id: "rechunk-status" }, `generation ${top.id}: ${top.status}${top.serving ? " (serving)" : ""} — ${top.done}/${total} documents${top.error ? ` — ${top.error}` : ""}`),
      el("div", { class: "progress" }, el("div", { style: `width:${pct}%` })));
    if (top.status !== "building") { await selectKb(state.kb); return; }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ------------------------------------------------------------------ documents

async function loadDocs() {
  state.docs = await api(`/api/kb/${encodeURIComponent(state.kb)}/documents`);
  $("#chunk-doc").replaceChildren(el("option", { value: "" }, "(paste a text below)"),
    ...state.docs.map((d) => el("option", { value: d.title }, d.title)));
  const readOnly = state.info.access !== "read_write";
  $("#docs").replaceChildren(
    el("tr", {}, ...["title", "status", "chunks", "progress", "usage_mode", "tokens", "cost (USD)", "error", ""].map((h) => el("th", {}, h))),
    ...state.docs.map((d) => {
      const mode = el("select", { class: "usage-mode", disabled: readOnly ? "disabled" : null, onchange: async (e) => {
        await api("/api/document", { kb: state.kb, title: d.title, action: "usage_mode", usage_mode: e.target.value });
        await loadDocs();
      } }, ...["rag", "system", "policy"].map((m) => el("option", { value: m }, m)));
      mode.value = d.usage_mode;
      const cost = [d.embedding_cost_usd, d.llm_cost_usd].filter((v) => v !== null).map(Number).reduce((a, b) => a + b, 0);
      return el("tr", { "data-doc": d.title }, el("td", {}, d.title), el("td", { class: "status" }, d.status),
        el("td", { class: "num" }, fmt(d.chunk_count)), el("td", {}, d.progress || ""), el("td", {}, mode),
        el("td", { class: "num" }, fmt(d.tokens_embedded)), el("td", { class: "num" }, fmt(cost, 4)),
        el("td", { class: "text" }, d.error || ""),
        el("td", {}, el("button", { type: "button", class: "write", onclick: async () => {
          await api("/api/document", { kb: state.kb, title: d.title, action: "reindex" });
          await loadDocs();
        } }, "Reindex"), " ", el("button", { type: "button", class: "write", onclick: async () => {
          if (await confirmBox(`Delete ${d.title}?`, el("p", {}, "Its chunks and vectors are removed."))) {
            await api("/api/document", { kb: state.kb, title: d.title, action: "delete" });
            await loadDocs();
          }
        } }, "Delete")));
    }));
}

// ------------------------------------------------------------------ wiring

function wire() {
  document.querySelectorAll(".tab").forEach((b) => b.addEventListener("click", () => {
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === b));
    document.querySelectorAll(".panel").forEach((p) => { p.hidden = p.id !== `tab-${b.dataset.tab}`; });
  }));
  $("#kb").addEventListener("change", (e) => selectKb(e.target.value));
  $("#search-form").addEventListener("submit", (e) => runSearch(e).catch(() => {}));
  $("#ab-mode").addEventListener("change", (e) => { $("#config-b").hidden = !e.target.checked; });
  $("#apply-a").addEventListener("click", () => applyPreset(configA()).catch(() => {}));
  $("#apply-b").addEventListener("click", () => applyPreset(configB()).catch(() => {}));
  $("#preview").addEventListener("click", () => previewChunks().catch(() => {}));
  $("#rechunk").addEventListener("click", () => rechunk().catch(() => {}));
  $("#refresh-docs").addEventListener("click", () => loadDocs().catch(() => {}));
  $("#new-set").addEventListener("submit", async (e) => {
    e.preventDefault();
    await api("/api/test-sets/save", { kb: state.kb, name: $("#set-name").value, queries: $("#set-lines").value }).catch(() => null)
      && loadSets();
  });
  $("#beir").addEventListener("submit", async (e) => {
    e.preventDefault();
    await api("/api/test-sets/import-beir", { kb: state.kb, name: $("#beir-name").value, folder: $("#beir-folder").value,
      split: $("#beir-split").value, limit: $("#beir-limit").value || null }).catch(() => null) && loadSets();
  });
}

wire();
loadKbs().catch(() => {});
