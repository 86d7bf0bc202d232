"""The web page of ``zoo serve --ui`` at ``/``: plain HTML and ``fetch`` against the server's own APIs.

Two texts -> their cosine (``/v1/embeddings``) and same/different at the model's fitted threshold (``/v1/models``
says which it has); a search box when an index is loaded (``/v1/search``); paraphrases when a SimBERT is served
(``/v1/paraphrases``). The page itself holds no data, so it is served without the API key; its requests send the
key typed into its key field.
"""

PAGE = """<!doctype html>
<html lang="zh">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>zoo</title>
<style>
 body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
 section { border: 1px solid #ddd; border-radius: 6px; padding: 0.8rem 1rem; margin: 1rem 0; }
 h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin: 0 0 0.5rem; }
 input[type=text], input[type=password] { width: 100%; box-sizing: border-box; padding: 0.4rem; margin: 0.2rem 0; }
 button { padding: 0.35rem 0.9rem; margin-top: 0.3rem; }
 .result { margin-top: 0.5rem; min-height: 1.2rem; } .error { color: #b00; }
 .same { color: #070; font-weight: bold; } .different { color: #a40; font-weight: bold; }
 ol { padding-left: 1.4rem; } small { color: #666; }
</style>
</head>
<body>
<h1>zoo</h1>
<p><label>model <select id="model"></select></label> <small id="model-info"></small></p>
<p id="key-row" hidden><label>API key <input id="api-key" type="password" autocomplete="off"></label></p>
<p id="status" class="result error"></p>

<section id="similarity">
<h2>Similarity</h2>
<input id="text-a" type="text" placeholder="第一句">
<input id="text-b" type="text" placeholder="第二句">
<span id="threshold-row" hidden><label>threshold <select id="threshold"></select></label></span>
<button id="compare">Compare</button>
<div class="result"><span id="cosine"></span> <span id="decision"></span></div>
</section>

<section id="search-box" hidden>
<h2>Search <small id="index-info"></small></h2>
<input id="query" type="text" placeholder="查询">
<label>mode <select id="mode"><option>dense</option><option>lexical</option><option>hybrid</option></select></label>
<label>top <input id="top-k" type="number" value="5" min="1" max="100" style="width:4rem"></label>
<button id="search">Search</button>
<ol id="hits" class="result"></ol>
</section>

<section id="paraphrase-box" hidden>
<h2>Paraphrases</h2>
<input id="para-text" type="text" placeholder="原句">
<button id="paraphrase">Paraphrase</button>
<ol id="paraphrases" class="result"></ol>
</section>

<script>
"use strict";
const $ = (id) => document.getElementById(id);
let models = [];

async function call(path, body) {
  const headers = {"Content-Type": "application/json"};
  const key = $("api-key").value.trim();
  if (key) headers["Authorization"] = "Bearer " + key;
  const response = await fetch(path, body === undefined ? {headers} :
                               {method: "POST", headers, body: JSON.stringify(body)});
  const reply = await response.json();
  if (response.status === 401) $("key-row").hidden = false;
  if (!response.ok) throw new Error((reply.error && reply.error.message) || reply.error || response.statusText);
  return reply;
}

function show(error) { $("status").textContent = error ? String(error.message || error) : ""; }

function selected() { return models.find((m) => m.id === $("model").value); }

function describe() {
  const m = selected();
  if (!m) return;
  const z = m.zoo;
  $("model-info").textContent = `${z.kind}, ${z.dim}-d`;
  const thresholds = Object.entries(z.thresholds || {});
  $("threshold").replaceChildren(...thresholds.map(([task, t]) => new Option(`${t.toFixed(4)} (${task})`, t)));
  $("threshold-row").hidden = thresholds.length === 0;
  $("paraphrase-box").hidden = !z.paraphrases;
}

async function load() {
  try {
    const reply = await call("/v1/models");
    models = reply.data.filter((m) => m.zoo.kind === "embedding");
    $("model").replaceChildren(...models.map((m) => new Option(m.id, m.id)));
    describe();
    if (reply.index) {
      $("search-box").hidden = false;
      $("index-info").textContent = `${reply.index.texts} texts`;
    }
    show(null);
  } catch (error) { show(error); }
}

async function compare() {
  $("cosine").textContent = ""; $("decision").textContent = "";
  try {
    const input = [$("text-a").value, $("text-b").value];
    const reply = await call("/v1/embeddings", {model: $("model").value, input});
    const [a, b] = reply.data.map((d) => d.embedding);
    const cosine = a.reduce((sum, x, i) => sum + x * b[i], 0);
    $("cosine").textContent = "cosine " + cosine.toFixed(4);
    if (!$("threshold-row").hidden) {
      const same = cosine >= parseFloat($("threshold").value);
      $("decision").textContent = same ? "same" : "different";
      $("decision").className = same ? "same" : "different";
    }
    show(null);
  } catch (error) { show(error); }
}

function listItems(target, rows) {
  target.replaceChildren(...rows.map(([text, score]) => {
    const li = document.createElement("li");
    li.textContent = `${text}  (${score.toFixed(4)})`;
    return li;
  }));
  target.dataset.count = rows.length;
  if (!rows.length) target.textContent = "(nothing found)";
}

async function search() {
  delete $("hits").dataset.count;
  try {
    const reply = await call("/v1/search", {query: $("query").value, mode: $("mode").value,
                                            top_k: parseInt($("top-k").value, 10) || 5});
    listItems($("hits"), reply.data.map((h) => [h.text === null ? h.id : h.text, h.score]));
    show(null);
  } catch (error) { show(error); }
}

async function paraphrase() {
  delete $("paraphrases").dataset.count;
  try {
    const reply = await call("/v1/paraphrases", {model: $("model").value, text: $("para-text").value, n: 20, k: 5});
    listItems($("paraphrases"), reply.data.map((p) => [p.text, p.score]));
    show(null);
  } catch (error) { show(error); }
}

$("model").addEventListener("change", describe);
$("compare").addEventListener("click", compare);
$("search").addEventListener("click", search);
$("paraphrase").addEventListener("click", paraphrase);
$("api-key").addEventListener("change", load);
load();
</script>
</body>
</html>
"""
