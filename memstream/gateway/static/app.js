// memstream inspector: conversations, a conversation's timeline, ask, forget and export, over the
// gateway's /ui/api. Memory text is always set as text (textContent), never parsed as HTML.
"use strict";

const state = { tenant: null, csrf: null, poll: null, selected: null, timeline: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else if (name.startsWith("data-")) node.setAttribute(name, String(value));
    else if (name === "hidden") node.hidden = true;
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const $ = (sel, root) => (root || document).querySelector(sel);
const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
const view = () => $("#view");

// Over the tenant's gateway limits (429), a read or a question waits as long as Retry-After says and
// goes again, a few times: the page loads slower instead of failing.
const RETRIES_429 = 3;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  let response;
  for (let tries = 0; ; tries += 1) {
    response = await fetch(path, {
      method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
    });
    const wait = parseInt(response.headers.get("retry-after"), 10);
    if (response.status !== 429 || tries >= RETRIES_429 || !(wait >= 0 && wait <= 30)) break;
    await sleep(wait * 1000);
  }
  if (response.status === 401 && path !== "/ui/login") { showLogin(); throw new Error("signed out"); }
  const data = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const error = new Error((data && data.detail) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return data;
}

function when(iso) {
  if (!iso) return "";
  return iso.replace("T", " ").replace(/:\d\d(\.\d+)?(\+00:00|Z)$/, "");
}

function stopPolling() {
  if (state.poll) clearInterval(state.poll);
  state.poll = null;
}

// --- sign in -------------------------------------------------------------------------------------

function showLogin() {
  stopPolling();
  state.tenant = state.csrf = null;
  $("#nav").hidden = true;
  $("#login").hidden = false;
  view().replaceChildren();
}

async function login(event) {
  event.preventDefault();
  $("#login-error").textContent = "";
  try {
    const who = await api("POST", "/ui/login", { key: $("#key").value });
    $("#key").value = "";
    signedIn(who);
    route();
  } catch (error) {
    $("#login-error").textContent = error.status === 401 ? "Unknown API key." : error.message;
  }
}

function signedIn(who) {
  state.tenant = who.tenant_id;
  state.csrf = who.csrf;
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#tenant").textContent = "tenant " + who.tenant_id;
}

async function logout() {
  try { await api("POST", "/ui/logout"); } finally { showLogin(); }
}

// --- pages -----------------------------------------------------------------------------------------

function llmUsageLine(usage) {
  const budget = usage.budget;
  const caps = budget ? [budget.calls != null ? budget.calls + " calls" : null,
    budget.tokens != null ? budget.tokens + " tokens" : null].filter(Boolean).join(", ") : "";
  const without = Object.entries(usage.fallbacks).map(([stage, n]) =>
    n + (stage === "extract" ? " flushes extracted" : " consolidation chunks decided") + " without the LLM");
  return el("p", { id: "llm-usage", class: "muted" },
    "LLM this window: " + usage.calls + " calls, " + usage.tokens + " tokens" +
    (caps ? " of a budget of " + caps : "") +
    (without.length ? "; over budget: " + without.join(", ") : "") + ".");
}

function importLine(imports) {
  // The tenant's history imports (the bulk lane): nothing shown before its first.
  if (!imports.sent) return null;
  return el("p", { id: "imports", class: "muted" }, "History import: " + imports.let_in + " of " + imports.sent +
    " turns let in, " + imports.remaining + " remaining (live turns and questions go first).");
}

async function conversationsPage(token) {
  const [data, usage, imports] = await Promise.all([api("GET", "/ui/api/conversations"),
    api("GET", "/ui/api/llm-usage"), api("GET", "/ui/api/imports")]);
  if (token !== state.route) return;  // another page was asked for meanwhile
  const rows = data.records.map((c) => el("tr", { "data-conversation-id": c.conversation_id },
    el("td", {}, el("a", { href: "#/c/" + encodeURIComponent(c.conversation_id), class: "text" }, c.conversation_id)),
    el("td", {}, c.turns), el("td", {}, c.cards), el("td", {}, c.scenes),
    el("td", { class: "text" }, c.speakers.join(", ")),
    el("td", {}, when(c.last_event_time)),
    el("td", { class: "lag" }, c.waiting_turns)));
  view().replaceChildren(
    el("h1", {}, "Conversations"),
    llmUsageLine(usage),
    importLine(imports) || "",
    rows.length ? el("table", { id: "conversations" },
      el("thead", {}, el("tr", {}, ["Conversation", "Turns", "Cards", "Scenes", "Speakers", "Last turn",
        "Ingest lag (turns not yet in a scene)"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows))
      : el("p", { id: "no-conversations", class: "muted" }, "No conversations yet for this tenant."));
}

function byCollection(records) {
  const out = { turns: [], cards: [], scenes: [], profiles: [] };
  for (const r of records) (out[r.collection] || (out[r.collection] = [])).push(r);
  return out;
}

function isCurrent(card) {
  return !card.superseded_by && !card.duplicate_of && !card.valid_to;
}

function cardBadges(card) {
  const old = !isCurrent(card);
  return [
    el("span", { class: "badge" + (old ? " old" : "") }, (card.type || "card") + " v" + (card.version || 1)),
    card.lineage && card.lineage.length ? el("span", { class: "badge" }, "merged") : null,
    old ? el("span", { class: "badge old" }, card.superseded_by ? "superseded " + when(card.valid_to)
      : card.duplicate_of ? "repeat" : "ended " + when(card.valid_to)) : null,
  ];
}

function select(kind, id) {
  state.selected = { kind, id };
  highlight();
  if (kind === "card") showLineage(id);
  else showTurn(id);
}

function highlight() {
  $$(".lit, .selected").forEach((n) => n.classList.remove("lit", "selected"));
  const sel = state.selected;
  if (!sel) return;
  if (sel.kind === "card") {
    const card = $$("#cards .card").find((n) => n.dataset.cardId === sel.id);
    if (!card) return;
    card.classList.add("selected");
    const turns = new Set(JSON.parse(card.dataset.turnIds));
    $$(".turn").forEach((n) => { if (turns.has(n.dataset.turnId)) n.classList.add("lit"); });
  } else {
    const turn = $$(".turn").find((n) => n.dataset.turnId === sel.id);
    if (!turn) return;
    turn.classList.add("selected");
    $$("#cards .card, #profiles .profile-item").forEach((n) => {
      if (JSON.parse(n.dataset.turnIds).includes(sel.id)) n.classList.add("lit");
    });
  }
}

async function showLineage(cardId) {
  const box = $("#detail");
  box.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  try {
    const data = await api("GET", "/ui/api/memories/" + encodeURIComponent(cardId));
    const parts = byCollection(data.records);
    box.replaceChildren(
      el("h3", {}, "Memory and its versions"),
      el("div", { id: "lineage" }, parts.cards.map((c) => el("div", { class: "card" + (c.id === cardId ? " selected" : "") },
        cardBadges(c), el("span", { class: "text" }, c.text),
        el("div", { class: "meta" }, "valid from " + when(c.valid_from) + (c.valid_to ? " to " + when(c.valid_to) : "")
          + (c.id === cardId ? " · selected" : ""))))),
      el("h3", {}, "From the turns"),
      el("div", {}, parts.turns.map((t) => el("div", { class: "meta-turn" },
        el("span", { class: "speaker text" }, t.speaker + ":"), el("span", { class: "text" }, t.text),
        el("span", { class: "meta" }, " " + t.turn_id)))));
  } catch (error) {
    box.replaceChildren(el("p", { class: "error" }, error.message));
  }
}

function showTurn(turnId) {
  const derived = $$("#cards .card.lit, #profiles .profile-item.lit").length;
  const conv = state.timeline.conversation_id;
  $("#detail").replaceChildren(
    el("h3", {}, "Turn " + turnId),
    el("p", { id: "derived" }, derived + " memories derived from it are highlighted."),
    el("button", { id: "forget-turn", class: "danger", type: "button", on: { click: () => confirmForget(conv,
      { turn_ids: [turnId] }, "turn " + turnId + " of " + conv + " and every memory derived from it") } },
    "Forget this turn"));
}

function pageBar(conv, data) {
  // Turns are read a page at a time (PAGE_TURNS, from the turn seq the page starts at): links to the
  // earlier and later pages, and back to the latest.
  const base = "#/c/" + encodeURIComponent(conv);
  const turns = data.records.filter((r) => r.collection === "turns" && numbered(r));
  const later = data.next_cursor !== null && data.next_cursor !== undefined;
  const first = firstSeq(data.summary);
  if (!(data.start > first) && !later) return null;
  return el("div", { class: "bar", id: "pages" },
    el("span", { class: "muted" }, "turns " + (turns.length ? turns[0].seq + "–" + turns[turns.length - 1].seq : "none")
      + " of " + data.summary.turns),
    data.start > first ? el("a", { id: "earlier", href: base + "/from/" + Math.max(first, data.start - PAGE_TURNS) }, "← earlier turns") : null,
    later ? el("a", { id: "later", href: base + "/from/" + data.next_cursor }, "later turns →") : null,
    data.from !== null ? el("a", { id: "latest", href: base }, "latest") : null);
}

function renderTimeline(conv, data) {
  const parts = byCollection(data.records);
  const sceneOf = new Map();
  for (const s of parts.scenes) for (const t of s.turn_ids || []) if (!sceneOf.has(t)) sceneOf.set(t, s);
  const turnsBox = el("div", { id: "turns" });
  let session = null, scene = null, sceneBox = null;
  for (const t of parts.turns) {
    if (t.session_id !== session) {
      session = t.session_id;
      turnsBox.append(el("div", { class: "session-head" }, "Session " + session + " · " + when(t.event_time)));
      scene = null;
    }
    const s = sceneOf.get(t.turn_id) || null;
    if (!sceneBox || s !== scene) {
      scene = s;
      sceneBox = el("div", { class: "scene", "data-scene-id": s ? s.id : "" },
        el("div", { class: "scene-label" }, s ? "topic: " + (s.topic_label || "") : "not in a scene yet"));
      turnsBox.append(sceneBox);
    }
    sceneBox.append(el("div", { class: "turn", "data-turn-id": t.turn_id, "data-seq": numbered(t) ? t.seq : null, on: { click: () => select("turn", t.turn_id) } },
      el("span", { class: "speaker text" }, t.speaker + ":"), el("span", { class: "text" }, t.text),
      el("span", { class: "meta" }, " " + t.turn_id)));
  }
  const cards = parts.cards.slice().sort((a, b) => String(a.event_time).localeCompare(String(b.event_time)));
  const cardsBox = el("div", { id: "cards" }, cards.map((c) => el("div", {
    class: "card" + (isCurrent(c) ? "" : " superseded"),
    "data-card-id": c.id, "data-turn-ids": JSON.stringify(c.turn_ids || []), "data-speaker": c.speaker || "",
    on: { click: () => select("card", c.id) },
  }, cardBadges(c), el("span", { class: "text" }, c.text), el("div", { class: "meta" }, (c.turn_ids || []).join(", ")))));
  const profiles = el("div", { id: "profiles" }, parts.profiles.map((p) => el("div", {
    class: "profile-item", "data-turn-ids": JSON.stringify(p.turn_ids || []) },
  el("span", { class: "speaker text" }, p.subject + " (" + p.field + "):"), el("span", { class: "text" }, p.text))));
  const sum = data.summary;
  const speakers = sum.speakers.map((sp) => el("button", { class: "danger forget-speaker", type: "button", "data-speaker": sp,
    on: { click: () => confirmForget(conv, { speaker: sp }, "every turn " + sp + " said in " + conv
      + " and every memory derived from them") } }, "Forget " + sp));
  view().replaceChildren(
    el("h1", { class: "text" }, conv),
    el("p", { id: "summary", class: "muted" }, sum.turns + " turns · " + sum.sessions.length + " sessions · "
      + sum.scenes + " scenes · " + sum.cards + " cards (" + sum.current_cards + " current) · "
      + sum.profiles + " profile items"),
    el("div", { class: "bar" },
      el("a", { href: "#/c/" + encodeURIComponent(conv) + "/ask", id: "ask-link" }, "Ask a question"),
      el("a", { href: "/ui/api/conversations/" + encodeURIComponent(conv) + "/export", id: "export" }, "Export JSONL"),
      speakers,
      el("button", { id: "forget-conversation", class: "danger", type: "button", on: { click: () => confirmForget(conv, {},
        "the whole conversation " + conv + ": " + sum.turns + " turns and every memory derived from them") } },
      "Forget the conversation")),
    el("p", { id: "forget-result", class: "muted" }),
    el("div", { class: "columns" },
      el("div", { class: "panel" }, el("h2", {}, "Turns"), pageBar(conv, data), turnsBox),
      el("div", {},
        state.detail,
        el("div", { class: "panel" }, el("h2", {}, "Cards"), cardsBox),
        el("div", { class: "panel" }, el("h2", {}, "Profiles"), profiles))));
  if (state.forgetResult) $("#forget-result").textContent = state.forgetResult;
  highlight();
}

const POLL_MS = 2000;
const FULL_EVERY = 15;  // polls: a full read now and then, whatever the counts say

// A turn's position; a fresh turn not numbered yet (ahead of its flush) has none and is the newest.
const numbered = (turn) => typeof turn.seq === "number";
// Imported history is numbered below 0 (before the conversation's live turns).
const firstSeq = (summary) => (typeof summary.first_seq === "number" ? Math.min(0, summary.first_seq) : 0);
const byPosition = (a, b) => (numbered(a) !== numbered(b) ? (numbered(a) ? -1 : 1)
  : numbered(a) ? a.seq - b.seq : (a.event_ts || 0) - (b.event_ts || 0));

function deltaCursor(data) {
  // The first turn no scene holds yet: the turns from there on, and what comes of them, are still
  // arriving; what cites only earlier turns changes its collection's counts when it changes.
  const settled = new Set();
  for (const r of data.records) if (r.collection === "scenes") for (const t of r.turn_ids || []) settled.add(t);
  let cursor = null;
  for (const r of data.records) {
    // Turns not numbered yet come with every read of the last page.
    if (r.collection !== "turns" || settled.has(r.turn_id) || !numbered(r)) continue;
    if (cursor === null || r.seq < cursor) cursor = r.seq;
  }
  return cursor !== null ? cursor : (data.summary.last_seq === null ? 0 : data.summary.last_seq + 1);
}

function mergeDelta(held, delta) {
  // The held page with the delta's records put in by id; null when the result does not add up to
  // the conversation's counts (something outside the delta changed: read it all again).
  if (delta.next_cursor !== null && delta.next_cursor !== undefined) return null;
  const byId = new Map(held.records.map((r) => [r.collection + "/" + r.id, r]));
  for (const r of delta.records) byId.set(r.collection + "/" + r.id, r);
  const records = Array.from(byId.values());
  const counts = { turns: 0, cards: 0, scenes: 0, profiles: 0 };
  for (const r of records) counts[r.collection] = (counts[r.collection] || 0) + 1;
  const s = delta.summary;
  const current = records.filter((r) => r.collection === "cards" && isCurrent(r)).length;
  if (counts.turns !== s.turns || counts.cards !== s.cards || counts.scenes !== s.scenes
    || counts.profiles !== s.profiles || current !== s.current_cards) return null;
  const turns = records.filter((r) => r.collection === "turns").sort(byPosition);
  return { records: turns.concat(records.filter((r) => r.collection !== "turns")), summary: s, next_cursor: null };
}

// Turns a page holds; /ui?page=N sets it (the gateway reads at most 5,000 a request).
const PAGE_TURNS = Math.min(5000, Math.max(1, parseInt(new URLSearchParams(location.search).get("page"), 10) || 2000));

async function timelinePage(conv, token, from) {
  state.selected = null;
  state.forgetResult = null;
  state.detail = el("div", { class: "panel", id: "detail" }, el("p", { class: "muted" },
    "Select a card to light up its turns and see its versions; select a turn to light up what came of it."));
  const path = "/ui/api/conversations/" + encodeURIComponent(conv);
  // The latest page runs to the end (up to the gateway's 5,000): positions a producer gave twice,
  // and turns not numbered yet, do not push the newest turns onto a page after it.
  const read = (cursor) => api("GET", path + "?cursor=" + cursor + "&limit=" + (from === null ? 5000 : PAGE_TURNS));
  let last = null, polls = 0, start = from === null ? 0 : from;
  const show = (data) => {
    const sig = JSON.stringify(data.summary) + data.records.length + JSON.stringify(data.records.map((r) => r.id + (r.superseded_by || "")));
    Object.assign(data, { conversation_id: conv, start, from });
    state.timeline = data;
    if (sig === last) return;
    last = sig;
    renderTimeline(conv, data);  // the detail panel is kept as it is (moved, not redrawn)
  };
  // The latest page: the last PAGE_TURNS positions (a one-turn read finds where they start).
  const latestStart = (summary) => (summary.last_seq === null ? 0 : Math.max(firstSeq(summary), summary.last_seq - PAGE_TURNS + 1));
  let probed = from !== null;
  const load = async () => {
    if (!probed) {
      start = latestStart((await api("GET", path + "?cursor=0&limit=1")).summary);
      probed = true;
    }
    let data = await read(start);
    if (from === null && latestStart(data.summary) > start) {  // it grew past a page meanwhile
      start = latestStart(data.summary);
      data = await read(start);
    }
    if (token === state.route) show(data);
  };
  // While the whole conversation fits a page, a poll reads only from the first turn still arriving
  // (a small page) and puts it into what is shown; a full read when that does not add up, every
  // FULL_EVERY polls, and on a page of a longer conversation.
  let busy = false;
  const poll = async () => {
    if (document.hidden || busy) return;  // nobody is looking, or the last read is still out
    busy = true;
    try {
      const held = state.timeline;
      polls += 1;
      if (!held || start > 0 || held.next_cursor !== null || polls % FULL_EVERY === 0) return await load();
      const delta = await read(deltaCursor(held));
      if (token !== state.route) return;
      const merged = mergeDelta(held, delta);
      if (merged) show(merged);
      else await load();
    } finally {
      busy = false;
    }
  };
  try {
    await load();
  } catch (error) {
    if (token === state.route) {
      view().replaceChildren(el("h1", {}, "Not found"), el("p", { id: "not-found", class: "error" }, error.message));
    }
    return;
  }
  if (token === state.route) state.poll = setInterval(() => poll().catch(() => {}), POLL_MS);  // turns streaming in appear
}

function confirmForget(conv, scope, what) {
  $("#dialog-text").textContent = "Forget " + what + "? This cannot be undone.";
  $("#dialog").hidden = false;
  const done = () => { $("#dialog").hidden = true; $("#dialog-confirm").onclick = null; };
  $("#dialog-cancel").onclick = done;
  $("#dialog-confirm").onclick = async () => {
    done();
    $("#forget-result").textContent = "Forgetting…";
    try {
      const out = await api("POST", "/ui/api/conversations/" + encodeURIComponent(conv) + "/forget", scope);
      const counts = Object.entries(out.counts).filter(([, n]) => n).map(([k, n]) => k + " " + n).join(", ");
      state.forgetResult = "Forgot " + what + ": " + (counts || "nothing was stored");
      $("#forget-result").textContent = state.forgetResult;
    } catch (error) {
      $("#forget-result").textContent = "Forget failed: " + error.message;
    }
  };
}

async function askPage(conv) {
  const result = el("div", { id: "result" });
  const form = el("form", { id: "ask-form", class: "bar" },
    el("input", { id: "question", placeholder: "Ask about " + conv, required: true, autocomplete: "off" }),
    el("button", { type: "submit" }, "Ask"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    result.replaceChildren(el("p", { class: "muted" }, "Asking…"));
    try {
      const reply = await api("POST", "/ui/api/conversations/" + encodeURIComponent(conv) + "/ask",
        { question: $("#question").value });
      result.replaceChildren(...renderReply(reply));
    } catch (error) {
      result.replaceChildren(el("p", { class: "error" }, error.message));
    }
  });
  view().replaceChildren(el("h1", {}, "Ask"), el("p", {}, el("a", { href: "#/c/" + encodeURIComponent(conv) }, "← timeline of " + conv)),
    form, result);
}

function renderReply(reply) {
  if (!reply.ok) return [el("p", { class: "error", id: "answer" }, reply.error)];
  const plan = reply.plan || {};
  const tokens = (reply.costs || []).map((c) => c.stage + ": " + c.calls + " call(s) " + c.prompt_tokens + "+" + c.completion_tokens + " tokens");
  return [
    el("div", { id: "answer", class: "answer text" }, reply.answer || "(evidence only: " + (reply.answer_error || "no answer asked") + ")"),
    el("p", { id: "plan", class: "muted" }, "access profile " + reply.access_profile + " · planner " + plan.planner
      + " · operation " + plan.operation + (plan.entities && plan.entities.length ? " · entities " + plan.entities.join(", ") : "")
      + " · " + reply.context_tokens + " context tokens" + (reply.trace_id ? " · trace " + reply.trace_id : "")),
    el("table", { id: "evidence" },
      el("thead", {}, el("tr", {}, ["", "Score", "Found by", "Memory", "Turns", "Time"].map((h) => el("th", {}, h)))),
      el("tbody", {}, reply.evidence.map((e) => el("tr", { class: "evidence", "data-turn-ids": JSON.stringify(e.turn_ids) },
        el("td", {}, e.evidence_id), el("td", {}, e.score.toFixed(3)), el("td", {}, e.found_by.join(", ")),
        el("td", { class: "text" }, e.text), el("td", { class: "turn-ids" }, e.turn_ids.join(", ")),
        el("td", {}, when(e.event_time)))))),
    el("p", { id: "steps", class: "meta" }, Object.entries(reply.latency_ms || {}).map(([k, v]) => k + " " + v.toFixed(0)).join(" · ")
      + (tokens.length ? " · " + tokens.join(" · ") : "")),
  ];
}

async function route() {
  stopPolling();
  const token = state.route = (state.route || 0) + 1;
  if (!state.tenant) {
    try { signedIn(await api("GET", "/ui/api/session")); } catch { showLogin(); return; }
    if (token !== state.route) return;
  }
  const hash = decodeURIComponent(location.hash.replace(/^#/, "")) || "/";
  const ask = hash.match(/^\/c\/(.+)\/ask$/);
  const page = hash.match(/^\/c\/(.+)\/from\/(-?\d+)$/);
  const conv = hash.match(/^\/c\/(.+)$/);
  try {
    if (ask) await askPage(ask[1]);
    else if (page) await timelinePage(page[1], token, parseInt(page[2], 10));
    else if (conv) await timelinePage(conv[1], token, null);
    else await conversationsPage(token);
  } catch (error) {
    if (error.message !== "signed out") view().replaceChildren(el("p", { class: "error" }, error.message));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", logout);
  window.addEventListener("hashchange", route);
  route();
});
