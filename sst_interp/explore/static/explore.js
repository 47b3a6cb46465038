// The explorer's page: the question list, a question, a position and the halting view, driven by the URL.
// Every view's state lives in the query string (q, depth, turn, pos, a, b, colour and the list's filters), so a
// view can be bookmarked; the server answers JSON (see sst_interp/explore/server.py).
"use strict";

const FILTERS = {search: "filter-search", correct: "filter-correct", staged: "filter-staged",
                 change: "filter-change", must_halt: "filter-must-halt", min_turns: "filter-min-turns",
                 stop_reason: "filter-stop"};
const state = {run: null, question: null, tokenCache: new Map()};

function $(id) { return document.getElementById(id); }
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v); else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}
function params() { return new URLSearchParams(location.search); }
function setParams(changes, push = true) {
  const p = params();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === "") p.delete(k); else p.set(k, v);
  }
  const url = "?" + p.toString();
  if (push) history.pushState(null, "", url); else history.replaceState(null, "", url);
}
function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = false;
}
function clearError() { $("error").hidden = true; $("error").textContent = ""; }

async function api(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) {
    const prefix = body.damaged ? "Damaged file: " : "Error: ";
    showError(prefix + body.error);
    throw new Error(body.error);
  }
  return body;
}
function fmt(x, digits = 3) { return x === null || x === undefined ? "–" : Number(x).toFixed(digits); }
// A token piece with its whitespace made visible (a space-only piece would otherwise read as nothing).
function visible(piece) {
  if (piece === null || piece === undefined || piece === "") return "∅";
  return piece.replace(/ /g, "␣").replace(/\n/g, "⏎").replace(/\t/g, "⇥");
}
// Viridis at t in [0, 1] (the stops of plotly's own scale), so a trace's colour places it on the colour bar.
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function viridis(t) {
  const x = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1), i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const f = x - i, c = VIRIDIS[i].map((v, j) => Math.round(v + f * (VIRIDIS[i + 1][j] - v)));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}
const AXIS_FONT = {size: 11};
function axis(text, extra) { return {title: {text, font: AXIS_FONT}, automargin: true, ...(extra || {})}; }
// Layers are integers: ticks at whole layers only (about a dozen at most), never at 0.5.
function layerAxis() { return axis("layer", {tickmode: "linear", tick0: 0, dtick: Math.max(1, Math.ceil((state.run?.num_layers || 1) / 12))}); }

// ------------------------------------------------------------------------------------------------ run
function showRun(run) {
  const done = Object.entries(run.recorded).map(([d, n]) => `d${d}: ${n}`).join(", ");
  $("run-info").textContent = `${run.name} · ${run.protocol} · depths ${run.depths.join(",")} (${done} of ` +
    `${run.questions} recorded) · L=${run.num_layers}, d=${run.hidden_size} · threshold ${fmt(run.threshold, 4)} ` +
    `(${run.threshold_source})`;
  document.body.dataset.threshold = run.threshold;
  document.body.dataset.thresholdReady = run.threshold_ready ? "1" : "0";
  const banner = $("model-banner");
  banner.textContent = run.model.text;
  banner.className = "banner-" + run.model.kind;
  banner.dataset.kind = run.model.kind;
  banner.hidden = false;
  const box = $("report-box");
  box.hidden = !run.report.length;
  $("report-count").textContent = `report (${run.report.length} files)`;
  $("report-links").replaceChildren(...run.report.map(r => el("a", {href: r.href, target: "_blank", text: r.name})));
}
async function loadRun() {
  const run = await api("/api/run");
  state.run = run;
  showRun(run);
  if (!run.threshold_ready && !state.thresholdTimer) state.thresholdTimer = setInterval(pollThreshold, 1500);
}
// Until the run's GMM fit arrives the page labels regimes at the paper's threshold; when it arrives, the threshold
// and the open position's verdict are redrawn without a navigation.
async function pollThreshold() {
  let run;
  try { run = await (await fetch("/api/run")).json(); } catch (err) { return; }
  if (!run.threshold_ready) return;
  clearInterval(state.thresholdTimer);
  state.run = run;
  showRun(run);
  const p = params();
  if (p.get("q") && p.get("pos") !== null && p.get("depth") !== null) {
    // only the regime panel depends on the threshold: the rest of the position view stays as it is
    try {
      const view = await api(`/api/position?q=${encodeURIComponent(p.get("q"))}&depth=${p.get("depth")}` +
                             `&turn=${p.get("turn") || 0}&pos=${p.get("pos")}`);
      renderRegime(view.regime, view.layers);
    } catch (err) { /* banner */ }
  }
}

// ------------------------------------------------------------------------------------------------ list
function filterQuery() {
  const p = params(), q = new URLSearchParams();
  for (const key of Object.keys(FILTERS)) if (p.get("f_" + key)) q.set(key, p.get("f_" + key));
  return q.toString();
}
function syncFilterInputs() {
  const p = params();
  for (const [key, id] of Object.entries(FILTERS)) $(id).value = p.get("f_" + key) || "";
}
let listRequest = 0;
async function loadList() {
  const mine = ++listRequest;
  const data = await api("/api/questions?" + filterQuery());
  if (mine !== listRequest) return;  // a newer filter's answer is on its way: this one is stale
  const depths = data.meta.depths;
  const stop = $("filter-stop");
  if (stop.options.length === 1) {
    for (const s of data.meta.stop_reasons) stop.append(el("option", {value: s, text: s}));
    stop.value = params().get("f_stop_reason") || "";
  }
  $("list-meta").textContent = `${data.meta.shown} of ${data.meta.total} questions · overthinks/recoveries vs ` +
    `${data.meta.reference}` + (data.meta.must_halt_note ? ` · ${data.meta.must_halt_note}` : "");
  const th = (text, title) => el("th", {text, title});
  const head = el("tr", {}, th("question", "question id (hover a row: its prompt)"),
                  ...depths.map(d => th("d" + d, `correct at flat depth ${d}`)),
                  th("staged", "staged depth: first correct depth, else the deepest"),
                  th("over", `overthinks: depths that fail where ${data.meta.reference} passes`),
                  th("rec", `recoveries: depths that pass where ${data.meta.reference} fails`),
                  th("halt", "MUST HALT depths (app:halting_training)"), th("turns", "model turns per depth"),
                  th("stop", "stop reasons"));
  $("qlist").tHead.replaceChildren(head);
  const selected = params().get("q");
  const rows = data.rows.map(row => {
    const cells = depths.map(d => {
      const c = row.correct[d];
      return el("td", {class: c === undefined ? "na" : c ? "ok" : "bad", "data-depth": d,
                       text: c === undefined ? "·" : c ? "✓" : "✗"});
    });
    const turns = depths.map(d => row.turns[d] ?? "·").join("/");
    const stops = [...new Set(Object.values(row.stop_reason))].join(",");
    const tr = el("tr", {class: "qrow" + (row.question_id === selected ? " selected" : ""),
                         "data-qid": row.question_id, title: row.prompt,
                         onclick: () => { setParams({q: row.question_id, depth: null, turn: null, pos: null});
                                          route(); }},
                  el("td", {class: "qid", text: row.question_id}), ...cells,
                  el("td", {text: row.staged_depth ?? "·"}),
                  el("td", {class: "bad", text: row.overthinks.join(",")}),
                  el("td", {class: "ok", text: row.recoveries.join(",")}),
                  el("td", {}, row.must_halt.length ? el("span", {class: "halt", text: row.must_halt.join(",")}) : ""),
                  el("td", {text: turns}), el("td", {class: "stop", text: stops, title: stops}));
    return tr;
  });
  $("qlist").tBodies[0].replaceChildren(...rows);
}

// ------------------------------------------------------------------------------------------------ question
function entropyColour(h, hmax) {
  const t = Math.max(0, Math.min(1, h / Math.max(hmax, 1e-9)));
  return `rgba(66, 133, 244, ${0.08 + 0.6 * t})`;
}
function renderTokens(turn, depth, colour, hmax) {
  const box = el("div", {class: "tokens"});
  for (const tok of turn.tokens) {
    const recorded = tok.argmax !== undefined;
    const blank = tok.piece.trim() === "";  // whitespace only: outlined so it can be seen and hovered
    const span = el("span", {class: "tok" + (recorded ? "" : " unrec") + (blank ? " ws" : ""), "data-depth": depth,
                             "data-turn": turn.turn, "data-pos": tok.position, text: tok.piece,
                             title: blank ? `whitespace ${JSON.stringify(tok.piece)}` : ""});
    if (recorded && colour === "changed" && tok.changed) span.classList.add("changed");
    if (recorded && colour === "entropy") {
      const h = tok.entropy[tok.entropy.length - 1];
      if (h !== null) span.style.background = entropyColour(h, hmax);
    }
    if (recorded) {
      span.addEventListener("mouseenter", ev => showTip(ev, depth, turn.turn, tok.position));
      span.addEventListener("mouseleave", () => { $("tip").hidden = true; });
      // the attention panel's iteration is kept while the depth stays (another depth may not have it)
      span.addEventListener("click", () => {
        const it = String(depth) === params().get("depth") ? params().get("it") : null;
        setParams({depth, turn: turn.turn, pos: tok.position, it}); route();
      });
    }
    box.append(span);
  }
  return box;
}
function renderQuestion(view) {
  const p = params();
  $("question").hidden = false;
  $("qtitle").textContent = `${view.question_id}` + (view.reference ? ` · reference ${view.reference}` : "");
  $("prompt").textContent = view.prompt;
  const colour = p.get("colour") || "changed";
  $("colour").value = colour;
  const depths = view.depths.map(d => d.depth);
  for (const id of ["div-a", "div-b"]) {
    $(id).replaceChildren(...depths.map(d => el("option", {value: d, text: d})));
  }
  const a = Number(p.get("a") || depths[0]), b = Number(p.get("b") || depths[depths.length - 1]);
  $("div-a").value = a; $("div-b").value = b;
  let hmax = 0;
  for (const d of view.depths) for (const t of d.turns) for (const tok of t.tokens)
    if (tok.entropy) for (const h of tok.entropy) if (h !== null) hmax = Math.max(hmax, h);
  const columns = view.depths.map(d => {
    const col = el("div", {class: "depth-col", "data-depth": d.depth});
    const verdict = d.correct === null ? "" : d.correct ? " ✓" : " ✗";
    col.append(el("h4", {class: d.correct ? "ok" : "bad",
                         text: `depth ${d.depth}${verdict} · ${d.n_turns} turn(s) · ${d.stop_reason ?? ""}` +
                               (d.final_answer ? ` · answer ${d.final_answer}` : "")}));
    for (const t of d.turns) {
      const block = el("div", {class: "turn", "data-turn": t.turn},
                       el("div", {class: "turn-head", text: `turn ${t.turn} · ${t.tokens.length} tokens · ${t.stop_reason}`}),
                       renderTokens(t, d.depth, colour, hmax));
      if (t.code) block.append(el("div", {class: "tool"}, el("b", {text: "code"}), el("pre", {text: t.code})));
      if (t.tool_status) {
        block.append(el("div", {class: "tool"}, el("b", {text: "tool "}),
                        el("span", {class: "status-" + t.tool_status, text: t.tool_status}),
                        el("pre", {text: t.tool_output ?? ""})));
      }
      col.append(block);
    }
    return col;
  });
  $("transcripts").replaceChildren(...columns);
  tokenLegend(colour, hmax);
  markDivergence(view, a, b);
}
// What the transcript's marks mean, for the colouring chosen.
function tokenLegend(colour, hmax) {
  const item = (cls, text, style) => el("span", {class: "legend-item"},
    el("span", {class: "swatch " + cls, ...(style ? {style} : {})}), text);
  const items = colour === "entropy"
    ? [el("span", {class: "legend-item"}, "entropy of the last iteration: ",
          el("span", {class: "swatch", style: `background: ${entropyColour(0, 1)}`}), ` 0 to `,
          el("span", {class: "swatch", style: `background: ${entropyColour(1, 1)}`}), ` ${fmt(hmax, 2)} nats`)]
    : [item("changed", "argmax changed across the iterations")];
  items.push(item("div-mark", "first divergence of the two depths"), item("unrec", "no logits recorded"),
             item("ws", "whitespace token"));
  $("token-legend").replaceChildren(...items);
}
function markDivergence(view, a, b) {
  document.querySelectorAll(".tok.div-mark").forEach(n => n.classList.remove("div-mark"));
  if (a === b) { $("div-info").textContent = "pick two different depths"; return; }
  const key = `${Math.min(a, b)}-${Math.max(a, b)}`;
  const per = view.divergence[key] || {};
  const parts = [];
  for (const [turn, pos] of Object.entries(per)) {
    if (pos < 0) { parts.push(`turn ${turn}: identical`); continue; }
    parts.push(`turn ${turn}: position ${pos}`);
    for (const d of [a, b]) {
      const node = document.querySelector(`.tok[data-depth="${d}"][data-turn="${turn}"][data-pos="${pos}"]`);
      if (node) node.classList.add("div-mark");
    }
  }
  $("div-info").textContent = parts.join("; ") || "no shared turns";
  $("div-info").dataset.key = key;
}
async function tokenDetail(depth, turn, pos) {
  const q = params().get("q");
  const key = `${q}|${depth}|${turn}|${pos}`;
  if (!state.tokenCache.has(key)) {
    state.tokenCache.set(key, api(`/api/token?q=${encodeURIComponent(q)}&depth=${depth}&turn=${turn}&pos=${pos}`));
  }
  return state.tokenCache.get(key);
}
function lensTable(detail, table) {
  const head = el("tr", {}, el("th", {text: "iteration"}), el("th", {text: "argmax"}), el("th", {text: "entropy"}),
                  el("th", {text: "top tokens (log-prob)"}));
  const rows = detail.iterations.map((it, i) => el("tr", {"data-iteration": it},
    el("td", {text: it}),
    el("td", {class: "argmax", "data-id": detail.argmax[i], title: `token id ${detail.argmax[i]}`,
              text: visible(detail.argmax_pieces[i])}),
    el("td", {class: "entropy", text: fmt(detail.entropy[i])}),
    el("td", {}, ...detail.top[i].map(t => el("span", {class: "top", "data-id": t.id, "data-logprob": t.logprob,
                                                       title: `token id ${t.id}`,
                                                       text: `${visible(t.piece)} ${fmt(t.logprob, 2)}  `})))));
  const tracked = el("tr", {}, el("td", {text: "tracked"}), el("td", {colspan: 3},
    el("span", {text: detail.tracked.pieces.slice(0, 5).map((s, j) =>
      `${visible(s)}: ${detail.tracked.logprobs.map(r => fmt(r[j], 2)).join(" → ")}`).join(" · ")})));
  table.replaceChildren(head, ...rows, tracked);
}
async function showTip(ev, depth, turn, pos) {
  const tip = $("tip");
  tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 660) + "px";
  tip.style.top = (ev.clientY + 16) + "px";
  const detail = await tokenDetail(depth, turn, pos);
  const table = el("table", {id: "tip-table", "data-depth": depth, "data-turn": turn, "data-pos": pos});
  lensTable(detail, table);
  tip.replaceChildren(el("div", {text: `depth ${depth} · turn ${turn} · position ${pos}`}), table);
  tip.hidden = false;
}

// ------------------------------------------------------------------------------------------------ position
function heat(div, z, x, y, title, extra) {
  Plotly.react(div, [{type: "heatmap", z, x, y, colorscale: "Viridis", zmin: extra?.zmin, zmax: extra?.zmax,
                      colorbar: {title: {text: extra?.colourTitle || "", side: "right"}, thickness: 12},
                      hovertemplate: "layer %{x}<br>%{y}<br>%{z:.4f}<extra></extra>"}],
               {title: {text: title, font: {size: 13}}, margin: {l: 60, r: 10, t: 30, b: 40},
                xaxis: layerAxis(), yaxis: axis(extra?.yTitle || "")}, {displayModeBar: false});
}
function renderRegime(regime, layers) {
  const status = $("regime-status");
  if (regime.available) {
    status.textContent = regime.low_overlap ? "low-overlap" : "stable";
    status.className = regime.low_overlap ? "low" : "stable";
    $("regime-threshold").textContent = `${regime.compared}: min over layers ${fmt(Math.min(...regime.per_layer.filter(v => v !== null)), 4)} ` +
      `(layer ${regime.min_layer}) vs threshold ${fmt(regime.threshold, 4)} (${regime.threshold_source})` +
      (regime.pre_divergence ? "" : ` · after the first divergence (${regime.first_divergence}) of those depths`);
    Plotly.react("regime-plot", [
      {x: layers, y: regime.per_layer, mode: "lines+markers", name: "overlap"},
      {x: [layers[0], layers[layers.length - 1]], y: [regime.threshold, regime.threshold],
       mode: "lines", name: regime.threshold_ready ? "this run's GMM threshold" : "the paper's threshold",
       line: {dash: "dash", color: "#d93025"}}],
      {title: {text: "regime: " + regime.compared, font: {size: 13}}, margin: {l: 50, r: 10, t: 30, b: 40},
       xaxis: layerAxis(), yaxis: axis(`top-${regime.k} overlap`),
       legend: {orientation: "h", y: -0.3, font: {size: 10}}}, {displayModeBar: false});
  } else {
    status.textContent = "regime n/a"; status.className = "";
    $("regime-threshold").textContent = regime.reason;
    Plotly.purge("regime-plot");
  }
}
async function loadPosition(q, depth, turn, pos) {
  const view = await api(`/api/position?q=${encodeURIComponent(q)}&depth=${depth}&turn=${turn}&pos=${pos}`);
  $("position").hidden = false;
  $("pos-title").textContent = `position ${pos} · turn ${turn} · depth ${depth} · ${view.states} states, top-${view.k}`;
  document.querySelectorAll(".tok.sel").forEach(n => n.classList.remove("sel"));
  const node = document.querySelector(`.tok[data-depth="${depth}"][data-turn="${turn}"][data-pos="${pos}"]`);
  if (node) node.classList.add("sel");
  const rows = view.iterations.slice(0, -1).map((it, i) => `iter ${it}→${view.iterations[i + 1]}`);
  heat("ov-heat", view.overlap, view.layers, rows, "top-k overlap, consecutive iterations",
       {zmin: 0, zmax: 1, colourTitle: `top-${view.k} overlap`, yTitle: "iterations compared"});
  const table = $("ov-table");
  table.replaceChildren(el("tr", {}, el("th", {text: ""}), ...view.layers.map(l => el("th", {text: "L" + l}))),
    ...view.overlap.map((r, i) => el("tr", {}, el("th", {text: rows[i]}),
      ...r.map((v, l) => el("td", {"data-row": i, "data-layer": l, "data-value": v, text: fmt(v, 4)})))));
  renderRegime(view.regime, view.layers);
  if (view.l2_delta) {
    // one line per layer, coloured along a sequential scale whose colour bar names the layer (18 or 62 layers
    // would repeat any qualitative cycle); hovering a line names its layer too
    const last = Math.max(view.layers.length - 1, 1);
    const traces = view.layers.map((l, j) => ({x: rows, y: view.l2_delta.map(r => r[j]), mode: "lines",
      name: "layer " + l, meta: {layer: l}, line: {color: viridis(j / last), width: 1.5}, showlegend: false,
      hovertemplate: `layer ${l}<br>%{x}<br>L2 %{y:.4g}<extra></extra>`}));
    const xs = [], ys = [], cs = [];
    view.layers.forEach((l, j) => view.l2_delta.forEach((r, i) => { xs.push(rows[i]); ys.push(r[j]); cs.push(l); }));
    traces.push({x: xs, y: ys, mode: "markers", name: "layers", hoverinfo: "skip", showlegend: false,
                 marker: {color: cs, colorscale: "Viridis", cmin: view.layers[0], cmax: view.layers[last], size: 5,
                          showscale: true, colorbar: {title: {text: "layer", side: "right"}, thickness: 12}}});
    Plotly.react("l2-plot", traces, {title: {text: "state L2 change per layer", font: {size: 13}},
                                     margin: {l: 55, r: 10, t: 30, b: 40}, xaxis: axis("iterations compared"),
                                     yaxis: axis("‖h(i+1) − h(i)‖₂")}, {displayModeBar: false});
    $("l2-note").hidden = true;
  } else {
    Plotly.purge("l2-plot");
    $("l2-note").textContent = view.l2_message || "no full hidden states at this position";
    $("l2-note").hidden = false;
  }
  if (view.lens.error) {
    $("lens").replaceChildren(el("tr", {}, el("td", {text: view.lens.error})));
    Plotly.purge("tracked-plot");
  } else {
    lensTable(view.lens, $("lens"));
    // a lens row selects its iteration for the attention panel
    for (const row of $("lens").querySelectorAll("tr[data-iteration]")) {
      row.classList.add("pick");
      row.title = "show the attention at this iteration";
      row.addEventListener("click", () => selectIteration(row.dataset.iteration));
    }
    const tr = view.lens.tracked;
    Plotly.react("tracked-plot", tr.ids.slice(0, 5).map((id, j) => ({x: view.lens.iterations,
      y: tr.logprobs.map(r => r[j]), mode: "lines+markers", name: visible(tr.pieces[j])})),
      {title: {text: "tracked log-probs (iteration-1 top 5)", font: {size: 13}},
       margin: {l: 50, r: 10, t: 30, b: 40}, xaxis: axis("iteration", {dtick: 1}), yaxis: axis("log-prob (nats)")},
      {displayModeBar: false});
  }
}

// ------------------------------------------------------------------------------------------------ attention
// White to navy by weight (0 to 1, linear): a key's colour is its share of the head's attention.
function weightColour(w) {
  const t = Math.max(0, Math.min(1, w)), to = [31, 78, 156];
  return `rgb(${to.map(v => Math.round(255 + t * (v - 255))).join(", ")})`;
}
async function loadAttention(q, depth, turn, pos) {
  const it = params().get("it");
  const view = await api(`/api/attention?q=${encodeURIComponent(q)}&depth=${depth}&turn=${turn}&pos=${pos}` +
                         (it ? `&it=${it}` : ""));
  renderAttention(view);
}
function selectIteration(it) {
  const p = params();
  setParams({it}, false);
  loadAttention(p.get("q"), p.get("depth"), p.get("turn") || 0, p.get("pos")).catch(() => {});
  loadFeatures(p.get("q"), p.get("depth"), p.get("turn") || 0, p.get("pos")).catch(() => {});
}
// One row per recorded (layer, head), grouped by layer: the keys the query sees as a heat strip (the key tokens
// head the columns), the heaviest keys named, and under top-k the mass on the keys not stored.
function renderAttention(view) {
  const box = $("attention-box"), note = $("attn-note");
  document.querySelectorAll("#lens tr.it-sel").forEach(n => n.classList.remove("it-sel"));
  if (!view.available) {
    box.dataset.available = "0";
    $("attn-title").textContent = "attention";
    $("attn-controls").hidden = true;
    note.textContent = view.message;
    note.hidden = false;
    $("attn-table").replaceChildren();
    return;
  }
  box.dataset.available = "1";
  box.dataset.iteration = view.iteration;
  box.dataset.pos = view.position;
  $("attn-title").textContent = `attention at iteration ${view.iteration}`;
  $("attn-controls").hidden = false;
  const select = $("attn-iteration");
  select.replaceChildren(...view.iterations.map(i => el("option", {value: i, text: i})));
  select.value = view.iteration;
  const at = view.iterations.indexOf(view.iteration);
  $("attn-prev").disabled = at <= 0;
  $("attn-next").disabled = at >= view.iterations.length - 1;
  $("attn-prev").dataset.to = view.iterations[at - 1] ?? "";
  $("attn-next").dataset.to = view.iterations[at + 1] ?? "";
  const lensRow = document.querySelector(`#lens tr[data-iteration="${view.iteration}"]`);
  if (lensRow) lensRow.classList.add("it-sel");
  const topK = view.top_k;
  // a key missing from a row: left out by top-k, or (every key stored) outside the layer's sliding window
  const absent = topK ? "not stored" : "not attended (outside the layer's window)";
  const anyAbsent = view.rows.some(r => r.keys.length < view.keys.length);
  $("attn-info").replaceChildren(
    `query: position ${view.position} (it chose ${visible(view.query_token)}) · ${view.rows.length} heads over ` +
    `${view.keys.length} keys (` +
    (topK ? `the ${topK} heaviest stored per head; rest: the mass on the others` : "every key stored") +
    ") · weight ",
    el("span", {class: "swatch", style: `background: ${weightColour(0)}; outline: 1px solid #ccc`}), " 0 to ",
    el("span", {class: "swatch", style: `background: ${weightColour(1)}`}), " 1",
    ...(anyAbsent ? [" · ", el("span", {class: "swatch absent"}), " " + absent] : []));
  note.textContent = view.keys_note || "";
  note.hidden = !view.keys_note;
  const narrow = view.keys.length > 24;
  const head = el("tr", {}, el("th", {class: "attn-label", text: "layer · head"}),
    ...view.keys.map((piece, k) => el("th", {class: "key " + view.key_kinds[k] + (narrow ? " vertical" : ""),
                                             "data-key": k, title: `key ${k} (${view.key_kinds[k]})`,
                                             text: visible(piece)})),
    el("th", {text: "heaviest keys"}), ...(topK ? [el("th", {text: "rest"})] : []));
  const rows = [head];
  let layer = null;
  for (const row of view.rows) {
    if (row.layer !== layer) {
      layer = row.layer;
      const name = view.layer_names[String(layer)];
      rows.push(el("tr", {class: "attn-layer"}, el("th", {colspan: view.keys.length + 3,
                                                          text: `layer ${layer}` + (name ? ` · ${name}` : "")})));
    }
    const weight = new Map(row.keys.map((k, j) => [k, row.weights[j]]));
    const cells = view.keys.map((piece, k) => {
      if (!weight.has(k)) {
        return el("td", {class: "w absent", "data-key": k, title: `${visible(piece)} (key ${k}): ${absent}`});
      }
      const w = weight.get(k);
      return el("td", {class: "w", "data-key": k, "data-weight": w, style: `background: ${weightColour(w)}`,
                       title: `${visible(piece)} (key ${k}): ${fmt(w, 4)}`});
    });
    const heaviest = el("td", {class: "heaviest"}, ...row.heaviest.map(h =>
      el("span", {class: "hk", "data-key": h.key, "data-weight": h.weight, title: `key ${h.key}`,
                  text: `${visible(h.piece)} ${fmt(h.weight, 2)}`})));
    rows.push(el("tr", {class: "attn-row", "data-layer": row.layer, "data-head": row.head},
                 el("th", {class: "attn-label", text: `L${row.layer} · head ${row.head}`}), ...cells, heaviest,
                 ...(topK ? [el("td", {class: "rest", "data-rest": row.remaining_mass,
                                      text: fmt(row.remaining_mass, 3)})] : [])));
  }
  $("attn-table").replaceChildren(...rows);
}

// The per-layer lens loads the model on the server, so it is fetched only while its box is open.
async function loadLayerLens() {
  const p = params();
  if (!$("layer-lens-box").open || p.get("pos") === null || p.get("depth") === null) return;
  const q = p.get("q"), depth = p.get("depth"), turn = p.get("turn") || 0, pos = p.get("pos");
  $("layer-lens-info").textContent = "loading the model's unembedding…";
  const view = await api(`/api/lens?q=${encodeURIComponent(q)}&depth=${depth}&turn=${turn}&pos=${pos}`);
  if (!view.available) {
    $("layer-lens-info").textContent = view.message;
    Plotly.purge("layer-lens-plot");
    return;
  }
  $("layer-lens-info").textContent = `each layer's state read through ${view.model}'s final norm and unembedding: ` +
    "the top token per iteration and layer; colour: its log-prob";
  const rows = view.iterations.map(i => `iter ${i}`);
  Plotly.react("layer-lens-plot", [{type: "heatmap", z: view.logprob, x: view.layers, y: rows,
    text: view.pieces.map(r => r.map(visible)), customdata: view.token_ids, texttemplate: "%{text}",
    colorscale: "Viridis", colorbar: {title: {text: "log-prob (nats)", side: "right"}, thickness: 12},
    hovertemplate: "layer %{x}<br>%{y}<br>%{text} (id %{customdata})<br>log-prob %{z:.3f}<extra></extra>"}],
    {title: {text: "per-layer logit lens: top token", font: {size: 13}}, margin: {l: 60, r: 10, t: 30, b: 40},
     xaxis: layerAxis(), yaxis: axis("iteration")}, {displayModeBar: false});
}

// ------------------------------------------------------------------------------------------------ halting
async function loadHalting(q) {
  if (!state.run.probe) { $("halting").hidden = true; return; }
  const view = await api(`/api/halting?q=${encodeURIComponent(q)}`);
  $("halting").hidden = false;
  $("halting-info").textContent = `${view.probe} · layer ${view.layer} · halts above ${fmt(view.threshold, 4)}`;
  // A shallower depth's turn whose logits are a prefix of a deeper depth's (the same prompt: the same iterations)
  // is drawn once, named by every depth it stands for, rather than as lines hidden under each other.
  const lines = [];
  let maxIt = 1;
  for (const [depth, turns] of Object.entries(view.depths).sort((a, b) => Number(b[0]) - Number(a[0]))) {
    for (const [turn, scores] of Object.entries(turns)) {
      maxIt = Math.max(maxIt, scores.length);
      const same = lines.find(l => l.turn === turn && scores.every((v, i) => Math.abs(v - l.scores[i]) <= 1e-6));
      if (same) same.depths.push(depth); else lines.push({turn, scores, depths: [depth]});
    }
  }
  const traces = lines.map(l => ({x: l.scores.map((_, i) => i + 1), y: l.scores, mode: "lines+markers",
                                  name: `d${l.depths.sort().join(",")} turn ${l.turn}`}));
  traces.push({x: [1, maxIt], y: [view.threshold, view.threshold], mode: "lines", name: "threshold",
               line: {dash: "dash", color: "#d93025"}});
  Plotly.react("halting-plot", traces, {title: {text: "probe logit per model turn and iteration", font: {size: 13}},
    margin: {l: 50, r: 10, t: 30, b: 40}, xaxis: axis("iteration", {dtick: 1}), yaxis: axis("probe logit")},
    {displayModeBar: false});
}

// ------------------------------------------------------------------------------------------------ features
// Shown only when the explorer was started with --dictionary. The iteration is the attention panel's (``it``).
async function loadFeatures(q, depth, turn, pos) {
  const box = $("features-box");
  if (!state.run || !state.run.dictionary) { box.hidden = true; return; }
  box.hidden = false;
  const it = params().get("it");
  const view = await api(`/api/features?q=${encodeURIComponent(q)}&depth=${depth}&turn=${turn}&pos=${pos}` +
                         (it ? `&it=${it}` : ""));
  renderFeatures(view);
}
// A feature's activation over the iterations as a small line (0 at the bottom, the row's largest at the top), the
// chosen iteration marked.
function sparkline(values, chosen) {
  const w = 96, h = 22, pad = 3, top = Math.max(...values, 1e-12);
  const x = j => pad + (values.length > 1 ? j * (w - 2 * pad) / (values.length - 1) : (w - 2 * pad) / 2);
  const y = v => h - pad - (v / top) * (h - 2 * pad);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("class", "sparkline");
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", values.map((v, j) => `${x(j)},${y(v)}`).join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#1f4e9c"); line.setAttribute("stroke-width", "1.5");
  svg.append(line);
  values.forEach((v, j) => {
    const dot = document.createElementNS(ns, "circle");
    dot.setAttribute("cx", x(j)); dot.setAttribute("cy", y(v)); dot.setAttribute("r", j === chosen ? 3 : 1.6);
    dot.setAttribute("fill", j === chosen ? "#d93025" : "#1f4e9c");
    svg.append(dot);
  });
  return svg;
}
function renderFeatures(view) {
  const note = $("feat-note");
  if (!view.available) {
    $("features-box").dataset.available = "0";
    $("feat-title").textContent = "features";
    $("feat-info").textContent = "";
    note.textContent = view.message;
    note.hidden = false;
    $("feat-table").replaceChildren();
    return;
  }
  const box = $("features-box");
  box.dataset.available = "1";
  box.dataset.iteration = view.iteration;
  $("feat-title").textContent = `features at iteration ${view.iteration}`;
  // the dictionary by its folder's name (the full path on hover): a long path would set the panel's width
  const name = view.dictionary.replace(/\/+$/, "").split("/").pop();
  $("feat-info").replaceChildren(`${view.active} of ${view.width} features active at layer ${view.layer}` +
    (view.layer_name ? ` (${view.layer_name})` : "") + ` · ${view.layout} dictionary `,
    el("span", {class: "dict-name", title: view.dictionary, text: name}),
    ` · the ${view.rows.length} largest, with their activation at every iteration (0: inactive; click an ` +
    "iteration to show it)");
  note.textContent = view.note || "";
  note.hidden = !view.note;
  const chosen = view.iterations.indexOf(view.iteration);
  const head = el("tr", {}, el("th", {text: "feature"}),
    ...view.iterations.map((it, j) => el("th", {class: "it-pick" + (j === chosen ? " it-sel" : ""),
                                               "data-iteration": it, title: "show this iteration",
                                               text: `it ${it}`})),
    el("th", {text: "through the loop",
              title: "each row scaled to its own largest activation; red: the shown iteration"}));
  const peak = Math.max(...view.rows.flatMap(r => r.activations), 1e-12);
  const rows = view.rows.map(r => el("tr", {class: "feat-row", "data-feature": r.feature},
    el("td", {class: "feat", text: `f${r.feature}`}),
    ...r.activations.map((v, j) => el("td", {class: j === chosen ? "it-sel" : "", "data-iteration": view.iterations[j],
                                             "data-activation": v, text: v === 0 ? "0" : fmt(v, 2),
                                             // light enough for dark text at every value
                                             style: `background: ${weightColour(0.45 * v / peak)}`})),
    el("td", {class: "spark"}, sparkline(r.activations, chosen))));
  $("feat-table").replaceChildren(head, ...rows);
  for (const th of $("feat-table").querySelectorAll("th.it-pick")) {
    th.addEventListener("click", () => selectIteration(th.dataset.iteration));
  }
}

// ------------------------------------------------------------------------------------------------ routing
async function route() {
  clearError();
  syncFilterInputs();
  try { await loadRun(); } catch (err) { /* shown in the banner */ }  // the threshold and the commits move on
  try { await loadList(); } catch (err) { /* shown in the banner */ }
  const p = params();
  const q = p.get("q");
  if (!q) { $("question").hidden = true; $("position").hidden = true; $("halting").hidden = true; return; }
  try {
    if (!state.question || state.question.question_id !== q) {
      state.question = await api(`/api/question/${encodeURIComponent(q)}`);
      state.tokenCache.clear();
    }
    renderQuestion(state.question);
  } catch (err) { return; }
  if (p.get("pos") !== null && p.get("depth") !== null) {
    try { await loadPosition(q, p.get("depth"), p.get("turn") || 0, p.get("pos")); } catch (err) { /* banner */ }
    try { await loadAttention(q, p.get("depth"), p.get("turn") || 0, p.get("pos")); } catch (err) { /* banner */ }
    try { await loadFeatures(q, p.get("depth"), p.get("turn") || 0, p.get("pos")); } catch (err) { /* banner */ }
    try { await loadLayerLens(); } catch (err) { /* banner */ }
  } else {
    $("position").hidden = true;
  }
  try { await loadHalting(q); } catch (err) { /* banner */ }
  document.body.dataset.ready = "1";
}

function wire() {
  for (const [key, id] of Object.entries(FILTERS)) {
    const input = $(id);
    const apply = () => { setParams({["f_" + key]: input.value}, false); loadList().catch(() => {}); };
    input.addEventListener(input.tagName === "SELECT" ? "change" : "input", apply);
  }
  $("colour").addEventListener("change", () => { setParams({colour: $("colour").value}, false);
                                                 renderQuestion(state.question); });
  for (const id of ["div-a", "div-b"]) {
    $(id).addEventListener("change", () => { setParams({a: $("div-a").value, b: $("div-b").value}, false);
                                             markDivergence(state.question, Number($("div-a").value),
                                                            Number($("div-b").value)); });
  }
  $("attn-iteration").addEventListener("change", () => selectIteration($("attn-iteration").value));
  for (const id of ["attn-prev", "attn-next"]) {
    $(id).addEventListener("click", () => { if ($(id).dataset.to) selectIteration($(id).dataset.to); });
  }
  $("layer-lens-box").addEventListener("toggle", () => { loadLayerLens().catch(() => {}); });
  window.addEventListener("popstate", route);
}

wire();
route();
