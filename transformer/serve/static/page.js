// The page of transformer-serve: pick a model, type sentences (one a line), see its outputs.
// Translation: each output with a cross-attention heatmap (layer and head chosen here; "mean"
// averages the heads) and the word alignments read from it; tagging: each tag under its word;
// classification: the label, every label's probability and the pooling's attention over tokens.
// The attention is the data transformer-inspect draws. ?model=<id>&text=<line> runs at load.
"use strict";

const $ = (id) => document.getElementById(id);
let models = [];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value; else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function current() { return models.find((m) => m.id === $("model").value); }

function showModel() {
  const m = current();
  if (!m) return;
  const decode = m.decode ? `, decode=${m.decode.strategy}` : "";
  $("about").textContent = `${m.kind}${decode} · ${m.checkpoint}`;
  $("beam-box").hidden = !m.options.includes("beam_size");
  if (m.decode && m.decode.beam_size) $("beam").value = m.decode.beam_size;
  $("attention-box").hidden = !m.attention;
}

async function load() {
  const answer = await fetch("/v1/models").then((r) => r.json());
  models = answer.models;
  for (const m of models) $("model").append(el("option", { value: m.id }, `${m.id} (${m.kind})`));
  const query = new URLSearchParams(location.search);
  if (query.get("model")) $("model").value = query.get("model");
  showModel();
  fetch("/health").then((r) => r.json()).then((h) => { $("health").textContent = `${h.status} · ${h.models} model(s)`; });
  document.body.dataset.state = "ready";
  if (query.get("text")) {
    $("inputs").value = query.get("text");
    $("form").requestSubmit();
  }
}

async function run(event) {
  event.preventDefault();
  const m = current();
  const inputs = $("inputs").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (!m || !inputs.length) return;
  const body = { model: m.id, inputs };
  if (m.attention && $("attention").checked) body.attention = true;
  if (m.options.includes("beam_size") && $("beam").value && m.decode && +$("beam").value !== m.decode.beam_size) {
    body.beam_size = +$("beam").value;
  }
  $("error").hidden = true;
  $("run").disabled = true;
  document.body.dataset.state = "busy";
  try {
    const response = await fetch(m.endpoint, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    const results = $("results");
    results.replaceChildren();
    const render = { translation: translation, tagging: tagging, classification: classification }[m.kind];
    answer.outputs.forEach((out, i) => results.append(render(inputs[i], out)));
    document.body.dataset.state = "done";
  } catch (err) {
    $("error").textContent = err.message;
    $("error").hidden = false;
    document.body.dataset.state = "error";
  } finally {
    $("run").disabled = false;
  }
}

// ------------------------------------------------------------------ translation
function heat(value, max) {
  const v = max > 0 ? Math.min(value / max, 1) : 0;
  return `background: rgba(31, 94, 160, ${v.toFixed(3)}); color: ${v > 0.55 ? "#fff" : "#1d232b"}`;
}

function pairs(alignment) {
  return (alignment || "").split(" ").filter((p) => p).map((p) => p.split("-").map(Number));
}

function matrix(att, layer, head) {
  const heads = att.cross[layer];
  if (head !== "mean") return heads[+head];
  return heads[0].map((row, t) => row.map((_, s) => heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
}

function heatmap(att, layer, head, aligned) {
  const m = matrix(att, layer, head);
  const max = Math.max(...m.flat());
  const links = new Set(aligned.map(([s, t]) => `${t},${s}`));
  const table = el("table", { class: "heatmap", "data-layer": layer, "data-head": head });
  table.append(el("thead", {}, el("tr", {}, el("th"), ...att.source.map((s) => el("th", {}, s)))));
  const body = el("tbody");
  m.forEach((row, t) => {
    const cells = row.map((v, s) => el("td", {
      style: heat(v, max), title: `${att.target[t]} ← ${att.source[s]}: ${v.toFixed(3)}`,
      class: links.has(`${t},${s}`) ? "aligned" : "",
    }));
    body.append(el("tr", {}, el("th", {}, att.target[t]), ...cells));
  });
  table.append(body);
  return table;
}

function translation(source, out) {
  const card = el("div", { class: "card translation" }, el("div", { class: "source" }, source),
    el("div", { class: "output" }, out.translation));
  if (out.hypotheses.length > 1) {
    card.append(el("ol", { class: "nbest" },
      ...out.hypotheses.map((h) => el("li", {}, `${h.text} (${h.score.toFixed(3)})`))));
  }
  const att = out.attention;
  if (!att) return card;
  const aligned = pairs(out.hypotheses[0].alignment);
  const layer = el("select", { "aria-label": "layer" },
    ...att.cross.map((_, i) => el("option", { value: i }, `layer ${i}`)));
  const head = el("select", { "aria-label": "head" }, el("option", { value: "mean" }, "mean of heads"),
    ...att.cross[0].map((_, i) => el("option", { value: i }, `head ${i}`)));
  layer.value = att.alignment_layer;
  const holder = el("div", { class: "heatmap-holder" });
  const draw = () => holder.replaceChildren(heatmap(att, +layer.value, head.value,
    +layer.value === att.alignment_layer && head.value === "mean" ? aligned : []));
  layer.onchange = draw;
  head.onchange = draw;
  draw();
  const words = aligned.map(([s, t]) => el("span", {}, `${att.source[s]} ↔ ${att.target[t]}`));
  card.append(el("div", { class: "controls" }, el("span", {}, "cross-attention"), layer, head), holder,
    el("div", { class: "alignments" }, el("strong", {}, `alignment (layer ${att.alignment_layer}): `), ...words));
  return card;
}

// ------------------------------------------------------------------ tagging
function tagging(source, out) {
  return el("div", { class: "card tagging" }, el("div", { class: "tagged" },
    ...out.words.map((w, i) => el("span", { class: "tok" }, el("span", { class: "word" }, w),
      el("span", { class: "tag" }, out.tags[i])))));
}

// ------------------------------------------------------------------ classification
function classification(source, out) {
  const card = el("div", { class: "card classification" }, el("div", { class: "source" }, source),
    el("div", { class: "output" }, `${out.label} (${out.probability.toFixed(3)})`));
  const probs = el("div", { class: "probs" });
  for (const [label, p] of Object.entries(out.probabilities)) {
    probs.append(el("span", {}, label), el("div", { class: "bar", style: `width: ${(p * 100).toFixed(1)}%` }),
      el("span", {}, p.toFixed(3)));
  }
  card.append(probs);
  const att = out.attention;
  if (att && att.pooling) {
    const mean = att.tokens.map((_, t) => att.pooling.reduce((sum, h) => sum + h[t], 0) / att.pooling.length);
    const max = Math.max(...mean);
    card.append(el("div", { class: "note" }, "attention pooling (mean of heads):"),
      el("div", { class: "pooled" }, ...att.tokens.map((tok, t) => el("span", {
        style: heat(mean[t], max), title: mean[t].toFixed(3),
      }, tok))));
  } else if (att) {
    card.append(el("div", { class: "note" }, "this model's pooling has no attention weights"));
  }
  return card;
}

$("model").addEventListener("change", showModel);
$("form").addEventListener("submit", run);
load().catch((err) => { $("error").textContent = `cannot reach the server: ${err.message}`; $("error").hidden = false; });
