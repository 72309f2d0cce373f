// The page of transformer-serve: pick a model, type sentences (one a line), see its outputs.
// Translation: each output (a copy button beside it; the n-best list with scores when the model
// searches a beam) with a cross-attention grid between words (a source word's pieces summed, a
// target word's averaged, as the server sends them; a switch shows the pieces), its colour scale
// and the word alignment as a table. Tagging: each tag under its word. Classification: the label,
// every label's probability and the pooling's weight on each word against an even share.
// The attention is the data transformer-inspect draws. ?model=<id>&text=<line> runs at load;
// &pieces=1 starts with pieces shown instead of words.
// A multilingual model (one model, many directions: its target language is a tag in the source)
// gets a language choice, "From" (any, or a source language) and "Into"; "All languages" sends
// the sentences once per language the model writes (from the chosen source, where one is) and
// shows each sentence's translations side by side. &src_lang=, &tgt_lang= preset the choice;
// &all=1 runs "All languages" at load instead.
// A speech model ("input": "audio" in /v1/models) takes audio files instead of lines: each is sent
// in base64, as the API takes an upload, and its output shown under its file name.
"use strict";

const $ = (id) => document.getElementById(id);
let models = [];

// Errors of the page itself (a script error, a rejected promise, a resource that failed to load)
// are kept on <html data-js-errors> as well as in the console, so a headless check can read them.
function recordError(message) {
  const root = document.documentElement;
  root.dataset.jsErrors = `${root.dataset.jsErrors ? root.dataset.jsErrors + "\n" : ""}${message}`;
}
window.addEventListener("error", (e) => recordError(e.message || `failed to load ${e.target && (e.target.src || e.target.href)}`), true);
window.addEventListener("unhandledrejection", (e) => recordError(String(e.reason)));

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value; else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function startWithPieces() { return new URLSearchParams(location.search).get("pieces") === "1"; }

function current() { return models.find((m) => m.id === $("model").value); }

function showModel() {
  const m = current();
  if (!m) return;
  const decode = m.decode ? `, decode=${m.decode.strategy}` : "";
  $("about").textContent = `${m.kind}${decode} · ${m.checkpoint}`;
  $("beam-box").hidden = !m.options.includes("beam_size");
  $("nbest-box").hidden = !m.options.includes("n_best");
  if (m.decode && m.decode.beam_size) {
    $("beam").value = m.decode.beam_size;
    $("nbest").value = m.decode.beam_size;  // a beam's whole list, unless asked for fewer
  }
  $("attention-box").hidden = !m.attention;
  $("inputs").hidden = m.input === "audio";
  $("files").hidden = m.input !== "audio";
  $("langs-row").hidden = !m.multilingual;
  if (m.multilingual) {
    const keep = { src: $("src-lang").value, tgt: $("tgt-lang").value };
    $("src-lang").replaceChildren(el("option", { value: "" }, "any"),
      ...m.source_languages.map((l) => el("option", { value: l }, l)));
    $("tgt-lang").replaceChildren(...m.target_languages.map((l) => el("option", { value: l }, l)));
    if (m.source_languages.includes(keep.src)) $("src-lang").value = keep.src;
    if (m.target_languages.includes(keep.tgt)) $("tgt-lang").value = keep.tgt;
  }
}

// The languages a multilingual model writes from the chosen source language (all it writes when
// no source is chosen), in the model's order.
function targetsFrom(m, src) {
  if (!src) return m.target_languages;
  return m.directions.map((d) => d.split("-")).filter(([s]) => s === src).map(([, t]) => t);
}

function languages(m, body, tgt) {
  if (!m.multilingual) return body;
  if ($("src-lang").value) body.src_lang = $("src-lang").value;
  body.tgt_lang = tgt || $("tgt-lang").value;
  return body;
}

async function load() {
  const answer = await fetch("/v1/models").then((r) => r.json());
  models = answer.models;
  for (const m of models) $("model").append(el("option", { value: m.id }, `${m.id} (${m.kind})`));
  const query = new URLSearchParams(location.search);
  if (query.get("model")) $("model").value = query.get("model");
  showModel();
  if (query.get("src_lang")) $("src-lang").value = query.get("src_lang");
  if (query.get("tgt_lang")) $("tgt-lang").value = query.get("tgt_lang");
  fetch("/health").then((r) => r.json()).then((h) => { $("health").textContent = `${h.status} · ${h.models} model(s)`; });
  document.body.dataset.state = "ready";
  if (query.get("text")) {
    $("inputs").value = query.get("text");
    if (query.get("all") === "1" && current().multilingual) allLanguages(); else $("form").requestSubmit();
  }
}

const BUSY = { translation: "translating…", tagging: "tagging…", classification: "classifying…" };

function inputLines() { return $("inputs").value.split("\n").map((s) => s.trim()).filter((s) => s); }

// The chosen audio files: their names and their contents in base64 (a data URL's payload).
async function audioFiles() {
  const files = [...$("files").files];
  const inputs = await Promise.all(files.map((file) => new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result.slice(reader.result.indexOf(",") + 1));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  })));
  return { names: files.map((file) => file.name), inputs };
}

// The page busy while ``work`` runs: the button off, the status line, stale results faded; an
// error (the server's one sentence) shown in place of the results.
async function busy(m, work) {
  $("error").hidden = true;
  $("run").disabled = $("all-langs").disabled = true;
  $("status").textContent = BUSY[m.kind] || "working…";
  $("results").classList.add("stale");
  document.body.dataset.state = "busy";
  try {
    await work();
    document.body.dataset.state = "done";
  } catch (err) {
    $("error").textContent = err.message;
    $("error").hidden = false;
    document.body.dataset.state = "error";
  } finally {
    $("run").disabled = $("all-langs").disabled = false;
    $("status").textContent = "";
    $("results").classList.remove("stale");
  }
}

async function post(m, body) {
  const response = await fetch(m.endpoint, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

// Every language the model writes (from the chosen source), one request each, sent together (the
// server batches them into one model call): per sentence, a card with its translations side by side.
async function allLanguages() {
  const m = current();
  const inputs = inputLines();
  if (!m || !m.multilingual || !inputs.length) return;
  const targets = targetsFrom(m, $("src-lang").value);
  await busy(m, async () => {
    const answers = await Promise.all(targets.map((t) => post(m, languages(m, { model: m.id, inputs }, t))));
    $("results").replaceChildren(...inputs.map((source, i) => el("div", { class: "card translation all-languages" },
      el("div", { class: "source" }, source),
      el("div", { class: "side-by-side" }, ...targets.map((t, k) => {
        const text = answers[k].outputs[i].translation;
        return el("div", { class: "in-language", "data-lang": t }, el("span", { class: "lang" }, t),
          el("div", { class: "output-row" }, el("div", { class: "output" }, text), copyButton(text)));
      })))));
  });
}

async function run(event) {
  event.preventDefault();
  const m = current();
  const audio = m && m.input === "audio";
  const { names, inputs } = audio ? await audioFiles() : { names: inputLines(), inputs: inputLines() };
  if (!m || !inputs.length) return;
  const body = languages(m, { model: m.id, inputs });
  if (m.attention && $("attention").checked) body.attention = true;
  let beam = m.decode && m.decode.beam_size;
  if (m.options.includes("beam_size") && $("beam").value && +$("beam").value !== beam) {
    beam = body.beam_size = +$("beam").value;
  }
  if (m.options.includes("n_best") && $("nbest").value) body.n_best = Math.min(+$("nbest").value, beam || 1);
  await busy(m, async () => {
    const answer = await post(m, body);
    const render = { translation: translation, tagging: tagging, classification: classification }[m.kind];
    $("results").replaceChildren(...answer.outputs.map((out, i) => render(names[i], out)));
  });
}

function copyButton(text) {
  const button = el("button", { type: "button", class: "copy", title: "copy to the clipboard" }, "copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
    } catch {  // a page served over plain HTTP to another host has no clipboard API
      const area = el("textarea", { style: "position: fixed; opacity: 0" });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "copied";
    setTimeout(() => { button.textContent = "copy"; }, 1500);
  });
  return button;
}

// ------------------------------------------------------------------ colour scales
const BLUE = [31, 94, 160], ORANGE = [201, 84, 22];

function shade(rgb, v) {
  return `background: rgba(${rgb.join(", ")}, ${v.toFixed(3)}); color: ${v > 0.55 ? "#fff" : "#1d232b"}`;
}

// A sequential scale from 0 to max (each grid's own), drawn with its values.
function sequentialLegend(max) {
  const ticks = [0, max / 2, max].map((v) => el("span", {}, v.toFixed(2)));
  return el("div", { class: "legend", "aria-label": "colour scale" },
    el("span", { class: "legend-name" }, "attention weight"),
    el("div", { class: "legend-scale" }, el("div", { class: "ramp sequential" }), el("div", { class: "ticks" }, ...ticks)));
}

// A diverging scale around an even share: log2(weight / share) from -2 (a quarter) to +2 (4x).
function ratioShade(ratio) {
  const t = Math.max(-2, Math.min(2, Math.log2(Math.max(ratio, 1e-6)))) / 2;
  return shade(t >= 0 ? BLUE : ORANGE, Math.abs(t) * 0.9);
}

function divergingLegend(share, unit) {
  const ticks = ["¼×", "½×", `1× (${unit} = ${share.toFixed(3)})`, "2×", "4×"].map((v) => el("span", {}, v));
  return el("div", { class: "legend", "aria-label": "colour scale" },
    el("span", { class: "legend-name" }, "weight ÷ even share"),
    el("div", { class: "legend-scale wide" }, el("div", { class: "ramp diverging" }), el("div", { class: "ticks" }, ...ticks)));
}

// ------------------------------------------------------------------ translation
function pairs(alignment) {
  return (alignment || "").split(" ").filter((p) => p).map((p) => p.split("-").map(Number));
}

function meanOfHeads(heads) {
  return heads[0].map((row, t) => row.map((_, s) => heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
}

// What the grid shows in the chosen unit: axis labels, the matrix, alignment pairs (source, target).
function view(att, out, layer, head, words) {
  const cross = words ? att.cross_words : att.cross;
  const heads = cross[layer];
  const m = head === "mean" ? meanOfHeads(heads) : heads[+head];
  let links = pairs(out.hypotheses[0].alignment);
  if (words) {
    const seen = new Set(links.map(([s, t]) => `${att.source_word[s]}-${att.target_word[t]}`));
    links = [...seen].map((p) => p.split("-").map(Number));
  }
  links.sort((a, b) => a[1] - b[1] || a[0] - b[0]);
  return {
    source: words ? att.source_words : att.source.map(piece),
    target: words ? att.target_words : att.target.map(piece),
    matrix: m, links,
  };
}

// A piece that is only whitespace is shown as the space it is, not as a bare dot.
function piece(label) { return label === "·" ? "␣" : label; }

function heatmap(v, showLinks, attrs) {
  const max = Math.max(...v.matrix.flat(), 1e-9);
  const links = new Set(showLinks ? v.links.map(([s, t]) => `${t},${s}`) : []);
  const table = el("table", { class: "heatmap", ...attrs });
  table.append(el("thead", {}, el("tr", {}, el("th", { class: "corner" }),
    ...v.source.map((s) => el("th", { class: "col", title: s }, el("div", {}, s))))));
  const body = el("tbody");
  v.matrix.forEach((row, t) => {
    const cells = row.map((w, s) => el("td", {
      style: shade(BLUE, w / max), title: `${v.target[t]} ← ${v.source[s]}: ${w.toFixed(3)}`,
      class: links.has(`${t},${s}`) ? "aligned" : undefined, "data-value": w.toFixed(4),
    }));
    body.append(el("tr", {}, el("th", { class: "row", title: v.target[t] }, v.target[t]), ...cells));
  });
  table.append(body);
  return el("div", { class: "grid" }, table, sequentialLegend(max));
}

function alignmentTable(v) {
  const rows = v.links.map(([s, t]) => el("tr", {}, el("td", {}, v.source[s]), el("td", { class: "arrow" }, "→"),
    el("td", {}, v.target[t])));
  return el("table", { class: "alignment-table" },
    el("thead", {}, el("tr", {}, el("th", {}, "source"), el("th"), el("th", {}, "output"))),
    el("tbody", {}, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 3 }, "no alignment"))])));
}

function translation(source, out) {
  const card = el("div", { class: "card translation" }, el("div", { class: "source" }, source),
    el("div", { class: "output-row" }, el("div", { class: "output" }, out.translation), copyButton(out.translation)));
  if (out.hypotheses.length > 1) {
    card.append(el("div", { class: "note" },
      `the beam's ${out.hypotheses.length} best (score: log-probability ÷ length^length_penalty, higher is better)`),
    el("table", { class: "nbest" }, el("tbody", {}, ...out.hypotheses.map((h, i) => el("tr", {}, el("td", { class: "rank" }, `${i + 1}.`),
        el("td", { class: "hyp" }, h.text), el("td", { class: "score" }, h.score.toFixed(3)))))));
  }
  const att = out.attention;
  if (!att) return card;
  const layer = el("select", { "aria-label": "layer" },
    ...att.cross.map((_, i) => el("option", { value: i }, `layer ${i}`)));
  const head = el("select", { "aria-label": "head" }, el("option", { value: "mean" }, "mean of heads"),
    ...att.cross[0].map((_, i) => el("option", { value: i }, `head ${i}`)));
  const pieces = el("input", { type: "checkbox", class: "pieces", checked: startWithPieces() });
  layer.value = att.alignment_layer;
  const about = el("p", { class: "about-grid" });
  const holder = el("div", { class: "heatmap-holder" });
  const aligned = el("div", { class: "alignments" });
  const draw = () => {
    const words = !pieces.checked;
    const v = view(att, out, +layer.value, head.value, words);
    const unit = words ? "word" : "piece";
    const which = head.value === "mean" ? "averaged over its heads" : `head ${head.value}`;
    about.textContent = `Rows: the output's ${unit}s; columns: the source's. A cell's colour is how much the ` +
      `decoder's cross-attention (layer ${layer.value}, ${which}) looked at that source ${unit} while it produced ` +
      `the row's ${unit}; a row sums to 1${words ? " (a source word adds up its pieces, an output word averages " +
      "them)" : ""}. Framed cells are the alignment.`;
    const showLinks = +layer.value === att.alignment_layer && head.value === "mean";
    holder.replaceChildren(heatmap(v, showLinks, { "data-layer": layer.value, "data-head": head.value, "data-unit": unit }));
    aligned.replaceChildren(el("div", { class: "note" }, `alignment (layer ${att.alignment_layer}), by ${unit}:`),
      alignmentTable(v));
  };
  layer.onchange = draw;
  head.onchange = draw;
  pieces.onchange = draw;
  draw();
  card.append(el("div", { class: "controls" }, el("span", {}, "cross-attention"), layer, head,
    el("label", {}, pieces, " show pieces")), about, el("div", { class: "attention-row" }, holder, aligned));
  return card;
}

// ------------------------------------------------------------------ tagging
function tagging(source, out) {
  const text = out.words.map((w, i) => `${w}/${out.tags[i]}`).join(" ");
  return el("div", { class: "card tagging" },
    el("div", { class: "output-row" }, el("div", { class: "tagged" },
      ...out.words.map((w, i) => el("span", { class: "tok" }, el("span", { class: "word" }, w),
        el("span", { class: "tag" }, out.tags[i])))), copyButton(text)));
}

// ------------------------------------------------------------------ classification
function classification(source, out) {
  const card = el("div", { class: "card classification" }, el("div", { class: "source" }, source),
    el("div", { class: "output-row" }, el("div", { class: "output" }, `${out.label} (${out.probability.toFixed(3)})`),
      copyButton(out.label)));
  const probs = el("div", { class: "probs" });
  for (const [label, p] of Object.entries(out.probabilities)) {
    probs.append(el("span", {}, label), el("div", { class: "track" }, el("div", { class: "bar", style: `width: ${(p * 100).toFixed(1)}%` })),
      el("span", {}, p.toFixed(3)));
  }
  card.append(probs);
  const att = out.attention;
  if (att && att.pooling) {
    const pieces = el("input", { type: "checkbox", class: "pieces", checked: startWithPieces() });
    const holder = el("div");
    const draw = () => holder.replaceChildren(pooled(att, !pieces.checked));
    pieces.onchange = draw;
    draw();
    card.append(el("div", { class: "controls" }, el("span", {}, "attention pooling (mean of heads)"),
      el("label", {}, pieces, " show pieces")), holder);
  } else if (att) {
    card.append(el("div", { class: "note" }, "this model's pooling has no attention weights"));
  }
  return card;
}

// The pooling's weight on each word (or piece) against its even share: with n pieces, a word of
// k pieces would get k/n if the pooling spread its weight evenly, so near-even attention stays pale
// and only what the pooling singles out, or leaves aside, is coloured.
function pooled(att, words) {
  const weights = words ? att.pooling_words : att.pooling;
  const labels = words ? att.words : att.tokens.map(piece);
  const n = att.tokens.length;
  const size = labels.map((_, i) => (words ? att.word.filter((w) => w === i).length : 1));
  const mean = labels.map((_, i) => weights.reduce((sum, h) => sum + h[i], 0) / weights.length);
  const spans = labels.map((label, i) => {
    const share = size[i] / n, ratio = mean[i] / share;
    return el("span", { class: "unit", style: ratioShade(ratio), "data-weight": mean[i].toFixed(4),
      title: `${label}: weight ${mean[i].toFixed(3)}, ${ratio.toFixed(2)}× its even share ${share.toFixed(3)}` },
    el("span", { class: "unit-text" }, label), el("span", { class: "unit-weight" }, mean[i].toFixed(2)));
  });
  const about = el("p", { class: "about-grid" }, `Each ${words ? "word" : "piece"} shows the pooling's weight on it ` +
    `(the weights add up to 1). Blue: more than an even share (1/${n} per piece${words ? ", k/" + n + " for a word of k pieces" : ""}), ` +
    "orange: less; white: about even.");
  return el("div", {}, about, el("div", { class: "pooled" }, ...spans), divergingLegend(1 / n, `1/${n}`));
}

$("model").addEventListener("change", showModel);
$("all-langs").addEventListener("click", allLanguages);
$("form").addEventListener("submit", run);
load().catch((err) => { $("error").textContent = `cannot reach the server: ${err.message}`; $("error").hidden = false; });
