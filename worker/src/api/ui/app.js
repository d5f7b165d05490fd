// The Weir web UI: a page over the JSON API of the same server (docs/openapi.yaml), with no
// build step and no dependencies. Views, chosen by the URL's hash:
//   #/                     executions of a function, filtered and paged (live: polled)
//   #/executions/<id>      one execution: params, result, children, history timeline (live:
//                          rendered from the execution's event stream, never polled), and
//                          what can be done to it: pause, resume, cancel, terminate, send an event,
//                          query it (a query function's value), reset to a row of its history
//                          (Reset here)
//   #/submit               a form that submits an execution
//   #/routes               the activity routes, each running or paused, with Pause and Resume
//                          for those Weir serves (read once, and again after an action until
//                          the server shows it: never polled otherwise)
//   #/batches              the batch operations (weir batch), each with its live counts
//                          (polled while one runs) and a Cancel button for a running one
// The API token (if the server asks for one) is kept in sessionStorage, for this tab only.
"use strict";

const LIVE_MS = 1000;
// A stream silent this long (the server sends a heartbeat every 15 s) is taken for dropped.
const STREAM_SILENCE_MS = 45_000;
const TOKEN_KEY = "weir.token";
const FUNCTION_KEY = "weir.function";

// ------------------------------------------------------------------ small helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

function time(text) {
  return text ? new Date(text) : null;
}

function clock(date) {
  return date ? date.toISOString().replace("T", " ").replace("Z", "") : "–";
}

// Milliseconds since the epoch, with the sub-millisecond digits of an RFC 3339 time (a Date
// keeps whole milliseconds; Weir's times have nanoseconds, and an inline step can take less
// than one).
function preciseMs(text) {
  const fraction = /\.(\d+)/.exec(text);
  const below = fraction && fraction[1].length > 3 ? Number(`0.${fraction[1].slice(3)}`) : 0;
  return Date.parse(text) + below;
}

function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 10) return `${ms.toFixed(ms < 1 ? 2 : 1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 60) return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

function outcomeOf(result) {
  if (!result || typeof result !== "object") return null;
  if ("ok" in result) return "ok";
  if ("err" in result) return "err";
  if (result.execution_error) return result.execution_error.kind;
  return null;
}

function badge(state, outcome) {
  const text = outcome ? `${state}: ${outcome}` : state;
  const tone = outcome === "ok" ? "ok" : outcome ? "bad" : state;
  return el("span", { class: `badge ${tone}`, "data-state": state, "data-outcome": outcome }, text);
}

function executionLink(id) {
  return el("a", { href: `#/executions/${encodeURIComponent(id)}`, class: "execution-link" }, id);
}

function notice(text, tone) {
  const box = document.getElementById("notice");
  box.textContent = text || "";
  box.className = tone || "";
  box.hidden = !text;
}

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method: "GET", headers, ...(options || {}) };
  // Every write is JSON, with a body or without: the API refuses any other (a page of
  // another origin could send those without asking).
  if (init.method !== "GET") headers["Content-Type"] = "application/json";
  if (init.body !== undefined) init.body = JSON.stringify(init.body);
  const response = await fetch(`/v1${path}`, init);
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (body && body.error) || {};
    throw new ApiError(response.status, error.code || "http", error.message || response.statusText);
  }
  return body;
}

function explain(error) {
  if (error instanceof ApiError && error.status === 401) {
    return `${error.message}: enter a token above`;
  }
  return error.message || String(error);
}

// ------------------------------------------------------------------ live refresh

// One view at a time is live; a new view stops the previous one's timers and stream.
let live = null;

function stopLive() {
  if (live) {
    clearTimeout(live.timer);
    clearInterval(live.ticker);
    if (live.abort) live.abort.abort();
  }
  live = null;
}

// Polls: `refresh` again a second after it returns, until it returns false.
function startLive(refresh) {
  stopLive();
  const mine = { timer: null };
  live = mine;
  const tick = async () => {
    let again = true;
    try {
      again = await refresh();
      notice("");
    } catch (error) {
      notice(explain(error), "error");
    }
    if (live === mine && again !== false) mine.timer = setTimeout(tick, LIVE_MS);
  };
  tick();
}

// Follows a server-sent event stream of the API (`GET /v1/executions/{id}/stream`), read with
// fetch() because EventSource cannot send the token. Calls onEvent(name, data) for each event
// (data parsed from its JSON). After a drop, or an end without `result`, it reconnects with
// Last-Event-ID (the seq of the last history entry it got), so that every entry comes once.
// A refusal (a missing token, a bad request) is shown and not retried.
function followStream(path, onEvent) {
  stopLive();
  const mine = { timer: null, ticker: null, abort: null };
  live = mine;
  let lastId = null;
  let over = false;
  let failures = 0;
  const dispatch = (event) => {
    if (!event.data.length) return;
    if (event.id !== null) lastId = event.id;
    failures = 0;
    let data;
    try {
      data = JSON.parse(event.data.join("\n"));
    } catch {
      return;
    }
    if (event.name === "result") over = true;
    if (event.name === "error") {
      notice(data.error ? data.error.message : "the stream failed", "error");
      // Gone from the store: nothing to come back for. Other failures: reconnect.
      if (data.error && data.error.code === "gone") over = true;
    }
    onEvent(event.name, data);
  };
  const connect = async () => {
    if (live !== mine) return;
    const abort = new AbortController();
    mine.abort = abort;
    let watchdog = null;
    const alive = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => abort.abort(), STREAM_SILENCE_MS);
    };
    try {
      const headers = { Accept: "text/event-stream" };
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (token) headers.Authorization = `Bearer ${token}`;
      if (lastId !== null) headers["Last-Event-ID"] = lastId;
      alive();
      const response = await fetch(`/v1${path}`, { headers, signal: abort.signal, cache: "no-store" });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        const error = (body && body.error) || {};
        throw new ApiError(response.status, error.code || "http", error.message || response.statusText);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      let event = { name: "message", data: [], id: null };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        alive();
        buffer += value;
        const lines = buffer.split("\n");
        buffer = lines.pop();
        for (const raw of lines) {
          const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
          if (line === "") {
            dispatch(event);
            event = { name: "message", data: [], id: null };
            continue;
          }
          if (line.startsWith(":")) continue; // a heartbeat
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let text = colon < 0 ? "" : line.slice(colon + 1);
          if (text.startsWith(" ")) text = text.slice(1);
          if (field === "event") event.name = text;
          else if (field === "data") event.data.push(text);
          else if (field === "id") event.id = text;
        }
      }
    } catch (error) {
      if (live !== mine) return;
      if (error instanceof ApiError && error.status < 500 && error.status !== 429) {
        notice(explain(error), "error");
        return;
      }
    } finally {
      clearTimeout(watchdog);
    }
    if (live !== mine || over) return;
    failures += 1;
    if (failures >= 3) notice("the live view lost the server: reconnecting…", "error");
    mine.timer = setTimeout(connect, Math.min(10_000, 250 * 2 ** failures));
  };
  connect();
  return mine;
}

// ------------------------------------------------------------------ the list

// Fills a <select> with the functions that have executions.
async function functionOptions(select, selected) {
  const { functions } = await api("/functions");
  select.replaceChildren(
    ...functions.map((f) => el("option", { value: f, selected: f === selected }, f)),
  );
  if (!functions.length) select.append(el("option", { value: "" }, "(no executions yet)"));
  return functions;
}

function listView(params) {
  const view = document.getElementById("view");
  const form = el(
    "form",
    { id: "filters", class: "filters" },
    el("label", {}, "Function ", el("select", { id: "function", name: "function" })),
    el(
      "label",
      {},
      "State ",
      el(
        "select",
        { id: "state", name: "state" },
        ["", "scheduled", "queued", "running", "paused", "finished"].map((s) =>
          el("option", { value: s, selected: params.get("state") === s }, s || "any"),
        ),
      ),
    ),
    el("label", {}, "Outcome ", el("input", {
      id: "outcome", name: "outcome", placeholder: "ok, err, trap, timed-out…",
      value: params.get("outcome") || "",
    })),
    el("label", {}, "Created since ", el("input", {
      id: "since", name: "since", type: "datetime-local", value: params.get("since") || "",
    })),
    el("label", {}, "Parent ", el("input", {
      id: "parent", name: "parent", placeholder: "execution id", value: params.get("parent") || "",
    })),
    el("button", { type: "submit" }, "Filter"),
  );
  const table = el(
    "table",
    { id: "executions" },
    el("thead", {}, el("tr", {},
      ["Execution", "Function", "State", "Created", "Finished", "Took"].map((h) => el("th", {}, h)))),
    el("tbody"),
  );
  const more = el("button", { id: "more", type: "button", hidden: true }, "Older");
  view.replaceChildren(el("h1", {}, "Executions"), form, table, more);

  const fn = form.querySelector("#function");
  const chosen = params.get("function") || localStorage.getItem(FUNCTION_KEY);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const [key, value] of new FormData(form)) if (value) next.set(key, value);
    if (next.get("function")) localStorage.setItem(FUNCTION_KEY, next.get("function"));
    location.hash = `#/?${next}`;
  });
  fn.addEventListener("change", () => form.requestSubmit());

  const query = () => {
    const q = new URLSearchParams({ limit: "50" });
    if (params.get("parent")) q.set("parent", params.get("parent"));
    else if (fn.value) q.set("function", fn.value);
    else return null;
    for (const key of ["state", "outcome"]) if (params.get(key)) q.set(key, params.get(key));
    if (params.get("since")) q.set("since", new Date(params.get("since")).toISOString());
    return q;
  };
  const rows = (executions) =>
    executions.map((e) => {
      const created = time(e.created_at);
      const finished = time(e.finished_at);
      return el("tr", { "data-id": e.execution_id },
        el("td", {}, executionLink(e.execution_id)),
        el("td", { class: "ffqn" }, e.ffqn),
        el("td", {}, badge(e.state, e.outcome)),
        el("td", {}, clock(created)),
        el("td", {}, clock(finished)),
        el("td", {}, finished ? duration(finished - created) : "–"));
    });
  let cursor = null;
  let older = [];
  more.addEventListener("click", async () => {
    const q = query();
    if (!q || !cursor) return;
    q.set("after", cursor);
    try {
      const page = await api(`/executions?${q}`);
      older = older.concat(page.executions);
      cursor = page.next;
      table.tBodies[0].append(...rows(page.executions));
      more.hidden = !cursor;
    } catch (error) {
      notice(explain(error), "error");
    }
  });

  let loaded = false;
  startLive(async () => {
    if (!loaded) {
      await functionOptions(fn, chosen);
      loaded = true;
    }
    const q = query();
    if (!q) return true;
    // The first page is live; pages fetched with "Older" stay below it.
    const page = await api(`/executions?${q}`);
    if (!older.length) cursor = page.next;
    table.tBodies[0].replaceChildren(...rows(page.executions), ...rows(older));
    more.hidden = !cursor;
    return true;
  });
}

// ------------------------------------------------------------------ one execution

// The id a request and its response share: a child's, a delay's or an event wait's.
function requestId(r) {
  return r.child_execution_id || r.delay_id || r.event_request_id;
}

// Pairs each request with its response: request id -> the entry that asked.
function timeline(entries) {
  const start = entries.length ? time(entries[0].recorded_at) : null;
  const asked = new Map();
  const answered = new Map();
  for (const entry of entries) {
    const e = entry.entry;
    if (e.kind === "event" && e.event.type === "join_set_request") {
      const r = e.event.request;
      asked.set(requestId(r), entry);
    } else if (e.kind === "response") {
      answered.set(requestId(e.response), entry);
    }
  }
  return { start, asked, answered };
}

function describe(entry, pairs) {
  const e = entry.entry;
  const at = time(entry.recorded_at);
  const since = (other) => (other ? at - time(other.recorded_at) : null);
  switch (e.kind) {
    case "created":
      return {
        kind: "created",
        what: `created ${e.ffqn}`,
        detail: e.reset_of ? `reset of ${e.reset_of.execution_id} at seq ${e.reset_of.seq}`
          : e.slots ? `waits for ${e.slots.map((s) => `${s.slot} (limit ${s.limit})`).join(", ")}`
          : e.component ? `build ${e.component}` : e.parent ? `child of ${e.parent}` : "",
        link: e.reset_of ? e.reset_of.execution_id : null,
      };
    case "reset":
      return { kind: "reset", what: `reset to seq ${e.to_seq} into`, link: e.new_execution_id, detail: e.reason };
    case "finished":
      return { kind: "finished", what: `finished ${outcomeOf(e.result) || ""}`, detail: json(e.result) };
    case "upgraded":
      return { kind: "upgraded", what: "upgraded", detail: `${e.from || "(unpinned)"} → ${e.to}` };
    case "cancel_requested":
      return { kind: "cancel-requested", what: "cancel requested", detail: e.reason };
    case "paused":
      return { kind: "paused", what: "paused", detail: e.reason };
    case "resumed":
      return { kind: "resumed", what: "resumed", detail: e.reason };
    case "slot_granted":
      return { kind: "slot-granted", what: "holds its concurrency slot", detail: e.slot };
    case "event_received":
      return { kind: "event-received", what: `event ${e.name} received, kept for a wait`, detail: json(e.payload), id: e.event_id };
    case "response": {
      const r = e.response;
      const id = requestId(r);
      const took = since(pairs.asked.get(id));
      if (r.type === "delay_finished") {
        return { kind: "delay-finished", what: `delay ${r.outcome}`, detail: id, id, took };
      }
      if (r.type === "event_delivered") {
        const o = r.outcome;
        return o.type === "received"
          ? { kind: "event-delivered", what: `event ${o.event_id} taken`, detail: json(o.payload), id, took }
          : { kind: "event-delivered", what: "event wait cancelled", detail: id, id, took };
      }
      // When the child says when its work ran (an activity's attempt, a child workflow):
      // that is its time; before it, the request waited (in its topic, or for a worker).
      const ran = r.ran ? preciseMs(r.ran.finished_at) - preciseMs(r.ran.started_at) : null;
      const asked = pairs.asked.get(id);
      const queued = r.ran && asked ? preciseMs(r.ran.started_at) - preciseMs(asked.recorded_at) : null;
      return {
        kind: "child-finished",
        what: `child finished ${outcomeOf(r.result) || ""}`,
        detail: r.ran
          ? `ran ${duration(Math.max(0, ran))}${queued !== null ? ` after ${duration(Math.max(0, queued))} waiting` : ""}: ${json(r.result)}`
          : json(r.result),
        id,
        took: r.ran ? Math.max(0, ran) : took,
        ran: r.ran,
      };
    }
    case "event": {
      const ev = e.event;
      const set = ev.join_set_id;
      switch (ev.type) {
        case "join_set_create":
          return { kind: "join-set", what: "join set created", set };
        case "join_set_request": {
          const r = ev.request;
          if (r.type === "delay_request") {
            const id = r.delay_id;
            return { kind: "delay", what: `delay until ${clock(time(r.expires_at))}`, set, id, open: id };
          }
          if (r.type === "event_request") {
            const id = r.event_request_id;
            return { kind: "event-wait", what: `waits for event ${r.name}`, set, id, open: id };
          }
          const id = r.child_execution_id;
          return {
            kind: "request",
            what: `${r.child_kind} ${r.target_ffqn}`,
            detail: json(r.params),
            set,
            id,
            open: id,
          };
        }
        case "join_next":
          return {
            kind: "join-next",
            what: ev.closing ? "join set closed: awaiting the rest" : "awaiting next response",
            detail: ev.requested_ffqn || "",
            set,
          };
        case "join_next_too_many":
          return { kind: "join-next", what: "awaited with nothing left", set };
        case "persist":
          return { kind: "persist", what: `persisted ${ev.value.type}`, detail: json(ev.value.value) };
        case "schedule":
          return {
            kind: "schedule",
            what: `scheduled ${ev.ffqn}`,
            detail: `${ev.execution_id} at ${clock(time(ev.scheduled_at))}`,
            id: ev.execution_id,
          };
        case "stub":
          return { kind: "stub", what: `stubbed (${ev.outcome})`, detail: json(ev.result), id: ev.target_execution_id };
        default:
          return { kind: "event", what: ev.type, detail: json(ev) };
      }
    }
    default:
      return { kind: e.kind, what: e.kind, detail: json(e) };
  }
}

// `points`: the seqs a reset may keep up to (a "Reset here" button on each), `reset(seq)`
// what it does.
function historyTable(entries, finishedAt, points, reset) {
  const pairs = timeline(entries);
  const last = entries.length ? time(entries[entries.length - 1].recorded_at) : null;
  const end = finishedAt || new Date(Math.max(Date.now(), last ? last.getTime() : 0));
  const span = Math.max(1, pairs.start ? end - pairs.start : 1);
  const position = (date) => Math.min(100, Math.max(0, ((date - pairs.start) / span) * 100));
  const body = entries.map((entry) => {
    const d = describe(entry, pairs);
    const at = time(entry.recorded_at);
    let bar = el("span", { class: "tick", style: `left:${position(at)}%` });
    let took = d.took;
    if (d.open) {
      // A request: a bar from it to its response, or to now while it is open; inside it, when
      // the child's work ran, if the answer says.
      const answer = pairs.answered.get(d.open);
      const until = answer ? time(answer.recorded_at) : end;
      took = answer ? preciseMs(answer.recorded_at) - preciseMs(entry.recorded_at) : until - at;
      const ran = answer && answer.entry.response.ran;
      const width = (from, to) => Math.max(0.5, position(to) - position(from));
      bar = el("span", {
        class: `bar ${answer ? "closed" : "open"}`,
        style: `left:${position(at)}%;width:${width(at, until)}%`,
      });
      if (ran) {
        const [from, to] = [time(ran.started_at), time(ran.finished_at)];
        bar = el("span", {}, bar, el("span", {
          class: "bar ran",
          title: `ran ${duration(Math.max(0, to - from))}`,
          style: `left:${position(from)}%;width:${width(from, to)}%`,
        }));
      }
    }
    const hasTook = took !== undefined && took !== null;
    return el("tr", { class: `entry ${d.kind}`, "data-kind": d.kind, "data-seq": entry.seq,
                      "data-at": entry.recorded_at },
      el("td", { class: "seq" }, entry.seq),
      el("td", { class: "at", title: clock(at) }, pairs.start ? `+${duration(at - pairs.start)}` : ""),
      el("td", { class: "set" }, d.set || ""),
      el("td", { class: "what" }, d.what, d.link ? [" ", executionLink(d.link)] : null,
        d.id ? el("div", { class: "id" }, d.id) : null),
      el("td", { class: "took", ...(hasTook ? { "data-ms": Math.max(0, took) } : {}) },
        hasTook ? duration(Math.max(0, took)) : ""),
      el("td", { class: "lane" }, bar),
      el("td", { class: "detail" }, d.detail ? el("code", {}, d.detail) : ""),
      el("td", { class: "reset" }, points && points.has(entry.seq)
        ? el("button", { type: "button", class: "reset-here", title: "Start a new execution from the history up to here",
                         onclick: () => reset(entry.seq) }, "Reset here")
        : ""));
  });
  return el("table", { id: "history" },
    el("thead", {}, el("tr", {},
      ["#", "At", "Join set", "Step", "Took", "Timeline", "Detail", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, body));
}

// The children an execution asked for, from its history (activities, stubs and workflows,
// each with its outcome once answered); a child workflow's own children below it, from its
// history, down to `depth` levels.
// A finished child's history is read once (`known`, by id); a running child workflow shows
// its own children on its own page.
async function childTree(entries, depth, known) {
  const pairs = timeline(entries);
  const items = [];
  for (const entry of entries) {
    const e = entry.entry;
    if (e.kind !== "event" || e.event.type !== "join_set_request") continue;
    const r = e.event.request;
    if (r.type !== "child_execution_request") continue;
    const id = r.child_execution_id;
    const answer = pairs.answered.get(id);
    const outcome = answer ? outcomeOf(answer.entry.response.result) : null;
    let below = null;
    if (r.child_kind === "workflow" && depth > 1 && answer) {
      if (!known.has(id)) {
        try {
          const child = await api(`/executions/${encodeURIComponent(id)}/history`);
          const last = child.entries[child.entries.length - 1];
          // Kept once the store has all of it (the child's history may lag its answer).
          if (last && last.entry.kind === "finished") known.set(id, child.entries);
          else below = await childTree(child.entries, depth - 1, known);
        } catch (error) {
          // Not materialised yet (or expired): shown without its children.
          if (!(error instanceof ApiError) || error.status !== 404) throw error;
        }
      }
      if (known.has(id)) below = await childTree(known.get(id), depth - 1, known);
    }
    items.push(el("li", { "data-id": id, "data-kind": r.child_kind },
      r.child_kind === "workflow" ? executionLink(id) : el("code", {}, id), " ",
      el("span", { class: "kind" }, r.child_kind), " ",
      el("span", { class: "ffqn" }, r.target_ffqn), " ",
      badge(answer ? "finished" : "running", outcome), below));
  }
  return items.length ? el("ul", { class: "tree" }, items) : null;
}

// Sends an event to a running execution; built once per page, so that what is typed survives
// the live refresh of the page below it.
function sendEventForm(id) {
  const name = el("input", { id: "event-name", name: "name", required: true, placeholder: "approved" });
  const payload = el("textarea", { id: "event-payload", name: "payload", rows: 2 }, "null");
  const eventId = el("input", { id: "event-id", name: "event_id", placeholder: "(a new id)" });
  const form = el("form", { id: "send-event", class: "submit", hidden: true },
    el("h2", {}, "Send an event"),
    el("label", {}, "Name ", name),
    el("label", {}, "Payload (JSON) ", payload),
    el("label", {}, "Event id (optional: the same id is taken once) ", eventId),
    el("button", { type: "submit" }, "Send event"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let value;
    try {
      value = JSON.parse(payload.value);
    } catch (error) {
      notice(`payload: ${error.message}`, "error");
      return;
    }
    try {
      const sent = await api(`/executions/${encodeURIComponent(id)}/events`, {
        method: "POST",
        body: { name: name.value.trim(), payload: value, ...(eventId.value ? { event_id: eventId.value.trim() } : {}) },
      });
      notice(`event ${sent.event_id} sent`);
    } catch (error) {
      notice(explain(error), "error");
    }
  });
  return form;
}

// Asks a running execution a query (a function of its component that reads its state and
// changes nothing) and shows the value, or why there is none. Built once per page, as the
// event form is.
function queryForm(id) {
  const name = el("input", { id: "query-name", name: "name", required: true, placeholder: "status" });
  const params = el("textarea", { id: "query-params", name: "params", rows: 1 }, "[]");
  const result = el("pre", { id: "query-result", hidden: true });
  const form = el("form", { id: "query", class: "submit", hidden: true },
    el("h2", {}, "Query"),
    el("label", {}, "Name ", name),
    el("label", {}, "Params (a JSON array) ", params),
    el("button", { type: "submit" }, "Query"),
    result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let args;
    try {
      args = JSON.parse(params.value || "[]");
    } catch (error) {
      notice(`params: ${error.message}`, "error");
      return;
    }
    result.classList.remove("error");
    result.hidden = false;
    result.textContent = "Asking…";
    try {
      const answer = await api(
        `/executions/${encodeURIComponent(id)}/queries/${encodeURIComponent(name.value.trim())}`,
        { method: "POST", body: { params: args } });
      result.textContent = `${json(answer.value)}\n(as of history version ${answer.version})`;
    } catch (error) {
      result.classList.add("error");
      result.textContent = error instanceof ApiError ? `${error.code}: ${explain(error)}` : explain(error);
    }
  });
  return form;
}

// Cancel (the workflow reacts, its compensations run) or terminate (at once).
function stopButton(id, name, label, terminate) {
  const button = el("button", { id: name, type: "button" }, label);
  button.addEventListener("click", async () => {
    const what = terminate ? "Terminate: it finishes at once, no compensation runs." : "Cancel: what it waits for is cancelled; it finishes cancelled.";
    if (!window.confirm(`${what} Go on?`)) return;
    try {
      await api(`/executions/${encodeURIComponent(id)}/cancel`, {
        method: "POST",
        body: { reason: terminate ? "terminated from the web UI" : "cancelled from the web UI", terminate },
      });
      notice(`${label} requested`);
    } catch (error) {
      notice(explain(error), "error");
    }
  });
  return button;
}

// Pause (it runs no code and starts nothing until resumed; what comes for it meanwhile waits)
// or resume. The answer says the state the store shows: one paused already (or, for a resume,
// not paused) is answered with nothing sent.
function pauseButton(id, name, label, resume) {
  const button = el("button", { id: name, type: "button" }, label);
  button.addEventListener("click", async () => {
    const what = resume
      ? "Resume: it takes what came for it while paused and goes on."
      : "Pause: it runs no code and starts nothing until resumed; what comes for it meanwhile waits.";
    if (!window.confirm(`${what} Go on?`)) return;
    try {
      const answer = await api(`/executions/${encodeURIComponent(id)}/${resume ? "resume" : "pause"}`, {
        method: "POST",
        body: { reason: resume ? "resumed from the web UI" : "paused from the web UI" },
      });
      const there = resume ? answer.state !== "paused" : answer.state === "paused";
      notice(there ? `${resume ? "not paused" : "paused"} already: nothing to do` : `${label} requested`);
    } catch (error) {
      notice(explain(error), "error");
    }
  });
  return button;
}

// A new execution from this one's history up to `seq`; this one goes on, or is cancelled or
// terminated, as asked. The new one's page opens.
async function resetAt(id, seq) {
  const then = window.prompt(
    `Reset to seq ${seq}: a new execution replays the history up to it on the newest build ` +
    "and goes on. And this one? keep, cancel or terminate", "keep");
  if (then === null) return;
  try {
    const answer = await api(`/executions/${encodeURIComponent(id)}/reset`, {
      method: "POST",
      body: { to_seq: seq, then: then.trim() || "keep", reason: "reset from the web UI" },
    });
    notice(`reset requested: ${answer.execution_id}`);
    location.hash = `#/executions/${encodeURIComponent(answer.execution_id)}`;
  } catch (error) {
    notice(explain(error), "error");
  }
}

function executionView(id) {
  const view = document.getElementById("view");
  const content = el("div", { id: "execution" }, el("p", {}, "Loading…"));
  const send = sendEventForm(id);
  const ask = queryForm(id);
  const stop = el("div", { id: "stop", class: "actions", hidden: true },
    pauseButton(id, "pause", "Pause", false),
    pauseButton(id, "resume", "Resume", true),
    stopButton(id, "cancel", "Cancel", false),
    stopButton(id, "terminate", "Terminate", true));
  const pause = stop.querySelector("#pause");
  const resume = stop.querySelector("#resume");
  view.replaceChildren(el("h1", {}, "Execution ", el("code", { id: "execution-id" }, id)), stop, content, send, ask);
  // What the stream has said: the execution (`status`), its entries in seq order, whether the
  // store does not have it yet (`waiting`).
  let execution = null;
  const entries = [];
  let waiting = false;
  const known = new Map();
  // The seqs a reset may keep up to, as of a history `pointsOf` entries long.
  let points = null;
  let pointsOf = -1;
  // Renders at most one at a time, once more if the stream said more meanwhile.
  let rendering = false;
  let again = false;
  const render = async () => {
    if (rendering) {
      again = true;
      return;
    }
    rendering = true;
    try {
      do {
        again = false;
        await draw();
      } while (again);
    } catch (error) {
      notice(explain(error), "error");
    } finally {
      rendering = false;
    }
  };
  const draw = async () => {
    if (!execution) {
      if (waiting) {
        // Just submitted: the store has it once a worker took it and the materialiser wrote it.
        content.replaceChildren(
          el("p", { id: "waiting" }, "Not in the store yet: waiting for a worker to take it…"),
        );
      }
      return;
    }
    // One moment's picture: the entries and the execution as the stream had told them when
    // the drawing began (what it says meanwhile is drawn next, `again`).
    const shown = entries.slice();
    const shownExecution = execution;
    // A finished execution is drawn with every entry its status counts: the status that says
    // so comes before them (the stream's order), and a page that showed it finished with its
    // history half drawn would say what never was.
    if (shownExecution.state === "finished" && shown.length < shownExecution.history_version) return;
    const children = await childTree(shown, 4, known);
    // Where a reset may cut (the server's rule), for a top-level execution: read again only
    // when the history grew.
    if (!shownExecution.parent_id && pointsOf !== shown.length) {
      pointsOf = shown.length;
      try {
        points = new Set((await api(`/executions/${encodeURIComponent(id)}/reset-points`)).points);
      } catch (error) {
        points = null;
      }
    }
    const created = time(shownExecution.created_at);
    const finished = time(shownExecution.finished_at);
    // When it was submitted (its creation record says, in histories written since v8): the
    // end-to-end time counts from there.
    const first = shown.length && shown[0].entry.kind === "created" ? shown[0].entry : null;
    const submitted = first && first.submitted_at ? time(first.submitted_at) : null;
    const outcome = outcomeOf(shownExecution.result);
    const runAgain = el("button", { id: "run-again", type: "button" }, "Run again");
    const { ffqn, params } = shownExecution;
    runAgain.addEventListener("click", async () => {
      try {
        const answer = await api("/executions", { method: "POST", body: { ffqn, params } });
        location.hash = `#/executions/${encodeURIComponent(answer.execution_id)}`;
      } catch (error) {
        notice(explain(error), "error");
      }
    });
    send.hidden = shownExecution.state === "finished";
    ask.hidden = shownExecution.state === "finished";
    // Cancel and Terminate while it has not finished (paused included: a cancellation resumes
    // it, so that it can compensate); Pause while it runs or waits for its start; Resume while
    // it is paused.
    stop.hidden = shownExecution.state === "finished";
    pause.hidden = shownExecution.state !== "running" && shownExecution.state !== "scheduled";
    resume.hidden = shownExecution.state !== "paused";
    content.replaceChildren(
      el("dl", { class: "facts" },
        el("dt", {}, "Function"), el("dd", { id: "ffqn" }, shownExecution.ffqn),
        el("dt", {}, "State"), el("dd", { id: "state" }, badge(shownExecution.state, outcome)),
        el("dt", {}, "Parent"), el("dd", {}, shownExecution.parent_id ? executionLink(shownExecution.parent_id) : "–"),
        el("dt", {}, "Submitted"), el("dd", { id: "submitted" }, submitted ? clock(submitted) : "–"),
        el("dt", {}, "Created"), el("dd", {}, clock(created),
          submitted ? el("span", { class: "id" }, ` after ${duration(Math.max(0, created - submitted))} waiting for a worker`) : null),
        el("dt", {}, "Finished"), el("dd", {}, clock(finished)),
        el("dt", {}, "Took"), el("dd", {
          id: "took",
          "data-since": (submitted || created).toISOString(),
          ...(finished ? { "data-ms": finished - (submitted || created) } : {}),
        }, took(submitted || created, finished), submitted ? " from its submission" : ""),
        el("dt", {}, "History version"), el("dd", {}, shownExecution.history_version)),
      el("div", { class: "actions" }, runAgain),
      el("h2", {}, "Params"), el("pre", { id: "params" }, json(shownExecution.params)),
      el("h2", {}, "Result"), el("pre", { id: "result" }, shownExecution.result ? json(shownExecution.result) : "(not finished)"),
      el("h2", {}, "Children"), el("div", { id: "children" }, children || "none"),
      el("h2", {}, "History"), historyTable(shown, finished, points, (seq) => resetAt(id, seq)),
    );
  };
  const mine = followStream(`/executions/${encodeURIComponent(id)}/stream`, (name, data) => {
    if (name === "waiting") waiting = true;
    else if (name === "status") execution = data;
    else if (name === "history") {
      // Each entry comes once; a reconnect resumes after the last one.
      if (!entries.length || data.seq > entries[entries.length - 1].seq) entries.push(data);
    } else if (name === "result" && execution) {
      execution = { ...execution, state: "finished", result: data.result, finished_at: data.finished_at };
    } else return;
    notice("");
    render();
  });
  // While it runs, the time it has taken so far counts up (no request: the page's own clock).
  mine.ticker = setInterval(() => {
    const cell = document.getElementById("took");
    if (cell && execution && execution.state !== "finished") {
      cell.textContent = took(time(cell.dataset.since), null);
    }
  }, LIVE_MS);
}

function took(created, finished) {
  return finished ? duration(finished - created) : `${duration(Date.now() - created)} so far`;
}

// ------------------------------------------------------------------ submit

function submitView() {
  stopLive();
  const view = document.getElementById("view");
  // Any function: those with executions are suggested, a new one is typed.
  const fn = el("input", {
    id: "submit-function", name: "ffqn", list: "known-functions", required: true,
    placeholder: "namespace:package/interface.function",
    value: localStorage.getItem(FUNCTION_KEY) || "",
  });
  const known = el("datalist", { id: "known-functions" });
  const form = el("form", { id: "submit", class: "submit" },
    el("label", {}, "Function ", fn, known),
    el("label", {}, "Params (a JSON array) ", el("textarea", { id: "submit-params", name: "params", rows: 6 }, "[]")),
    el("label", {}, "Idempotency key (optional) ", el("input", { id: "submit-key", name: "key" })),
    // Submissions are taken round-robin by tenant within a partition; the server checks it.
    el("label", {}, "Tenant (optional) ", el("input", { id: "submit-tenant", name: "tenant" })),
    el("button", { type: "submit" }, "Submit"));
  view.replaceChildren(el("h1", {}, "Submit an execution"), form);
  api("/functions")
    .then(({ functions }) => known.replaceChildren(...functions.map((f) => el("option", { value: f }))))
    .catch((e) => notice(explain(e), "error"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let params;
    try {
      params = JSON.parse(form.querySelector("#submit-params").value);
    } catch (error) {
      notice(`params: ${error.message}`, "error");
      return;
    }
    const key = form.querySelector("#submit-key").value;
    const tenant = form.querySelector("#submit-tenant").value;
    try {
      const answer = await api("/executions", {
        method: "POST",
        body: {
          ffqn: fn.value.trim(), params,
          ...(key ? { idempotency_key: key } : {}),
          ...(tenant ? { tenant } : {}),
        },
      });
      localStorage.setItem(FUNCTION_KEY, fn.value.trim());
      location.hash = `#/executions/${encodeURIComponent(answer.execution_id)}`;
    } catch (error) {
      notice(explain(error), "error");
    }
  });
}

// ------------------------------------------------------------------ routes

// How long, at most, the view reads the routes again after a pause or a resume for the
// server to show it (it takes effect in about a second: the switch is on weir.control).
const ROUTE_SETTLE_MS = 15_000;

// One route's row: its topic, interfaces, who serves it, whether it is paused (why, since
// when), and the button that fits (none for a route served outside Weir: Weir runs none of
// its requests, so there is nothing here to hold).
function routeRow(r, act) {
  const state = r.paused ? "paused" : "running";
  let button = null;
  if (!r.external) {
    button = r.paused
      ? el("button", { type: "button", class: "route-resume", onclick: () => act(r, false) }, "Resume")
      : el("button", { type: "button", class: "route-pause", onclick: () => act(r, true) }, "Pause");
  }
  return el("tr", { "data-topic": r.topic, "data-state": state, "data-external": String(r.external) },
    el("td", { class: "topic" }, el("code", {}, r.topic)),
    el("td", { class: "interfaces" }, r.interfaces.map((i) => el("div", { class: "ffqn" }, i))),
    el("td", { class: "served" }, r.external ? "a service outside Weir" : "Weir",
      r.rate ? el("div", { class: "rate id", title: "per activity worker process" },
        `at most ${r.rate.per_second}/s, burst ${r.rate.burst}`) : null),
    el("td", { class: "state" }, badge(state),
      r.paused ? el("div", { class: "reason" }, r.paused.reason) : null,
      r.paused ? el("div", { class: "since id", "data-at": r.paused.paused_at },
        `since ${clock(time(r.paused.paused_at))}`) : null),
    el("td", { class: "act" }, button));
}

function routesView() {
  stopLive();
  const mine = { timer: null };
  live = mine;
  const view = document.getElementById("view");
  const table = el("table", { id: "routes" },
    el("thead", {}, el("tr", {},
      ["Topic", "Interfaces", "Served by", "State", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}));
  const reload = el("button", { id: "routes-reload", type: "button" }, "Reload");
  view.replaceChildren(
    el("h1", {}, "Routes"),
    el("p", { class: "hint" },
      "A paused route starts no attempt of its activities (attempts already running go on); " +
      "its requests wait in Kafka and run once it is resumed. Pausing and resuming needs an admin token."),
    el("div", { class: "actions" }, reload),
    table);
  // Shows the routes as the server has them now; the list.
  const load = async () => {
    const { routes } = await api("/routes");
    if (live === mine) table.tBodies[0].replaceChildren(...routes.map((r) => routeRow(r, act)));
    return routes;
  };
  // Waits `ms`, unless the view is left meanwhile (then never: what waits is dropped).
  const delay = (ms) => new Promise((resolve) => { mine.timer = setTimeout(resolve, ms); });
  // Reads the routes again until `topic` shows `paused` (or not), for a bounded time: a
  // short interval at first, longer after.
  const settle = async (topic, paused) => {
    const until = Date.now() + ROUTE_SETTLE_MS;
    for (let wait = 100; live === mine; wait = Math.min(1000, wait * 2)) {
      const route = (await load()).find((r) => r.topic === topic);
      if (route && Boolean(route.paused) === paused) return true;
      if (Date.now() >= until) return false;
      await delay(wait);
    }
    return false;
  };
  const act = async (r, pausing) => {
    let body;
    if (pausing) {
      const reason = window.prompt(
        `Pause ${r.topic}: no attempt of ${r.interfaces.join(", ")} starts until it is resumed ` +
        "(attempts already running go on); its requests wait in Kafka. Why?",
        "paused from the web UI");
      if (reason === null) return;
      body = { reason: reason.trim() || "paused from the web UI" };
    } else if (!window.confirm(`Resume ${r.topic}: the requests that waited run. Go on?`)) {
      return;
    }
    try {
      const answer = await api(`/routes/${encodeURIComponent(r.topic)}/${pausing ? "pause" : "resume"}`,
        { method: "POST", body });
      notice(`${pausing ? "pause" : "resume"} of ${answer.topic} sent: waiting for the server to show it…`);
      if (await settle(answer.topic, pausing)) {
        notice(`${answer.topic} ${pausing ? "paused" : "resumed"} (every worker follows within about a second)`);
      }
      else if (live === mine) notice(`${answer.topic}: the server does not show it ${pausing ? "paused" : "resumed"} yet; reload to see`, "error");
    } catch (error) {
      notice(explain(error), "error");
    }
  };
  reload.addEventListener("click", () => {
    notice("");
    load().catch((e) => notice(explain(e), "error"));
  });
  load().catch((e) => notice(explain(e), "error"));
}

// ------------------------------------------------------------------ batches

// One batch's row: what it does to which executions, its live counts (a bar of what it
// acted on and skipped, of what it has seen so far), its status, and Cancel while it runs.
function batchRow(b, cancel) {
  const f = b.filter || {};
  const which = f.function ? f.function : `children of ${f.parent}`;
  const filters = [f.state && `state ${f.state}`, f.outcome && `outcome ${f.outcome}`]
    .filter(Boolean).join(", ");
  const seen = b.seen || 0;
  return el("tr", { "data-id": b.id, "data-status": b.status },
    el("td", { class: "id" }, el("code", {}, b.id)),
    el("td", {}, `${b.action} `, el("span", { class: "ffqn" }, which), filters ? ` (${filters})` : "",
      el("div", { class: "id" }, `at most ${b.rate}/s`)),
    el("td", { class: "count" },
      el("progress", { max: Math.max(seen, 1), value: b.acted }),
      el("div", {}, `${b.acted} acted, ${b.skipped_finished + b.skipped_already + (b.skipped_child || 0)} skipped of ${seen} seen`)),
    el("td", {}, badge(b.status)),
    el("td", { class: "act" }, b.status === "running"
      ? el("button", { type: "button", class: "batch-cancel", onclick: () => cancel(b) }, "Cancel")
      : null));
}

function batchesView() {
  stopLive();
  const mine = { timer: null };
  live = mine;
  const view = document.getElementById("view");
  const table = el("table", { id: "batches" },
    el("thead", {}, el("tr", {},
      ["Batch", "What", "Progress", "Status", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}));
  view.replaceChildren(
    el("h1", {}, "Batches"),
    el("p", { class: "hint" },
      "Batch operations (weir batch start): one action on every execution a list filter selects, " +
      "at a rate, run by the workflow workers. The counts are live while a batch runs."),
    table);
  const cancel = async (b) => {
    if (!window.confirm(`Cancel batch ${b.id}? The requests it sent stand.`)) return;
    try {
      await api(`/batches/${encodeURIComponent(b.id)}/cancel`, { method: "POST" });
      notice(`cancel of ${b.id} sent`);
    } catch (error) {
      notice(explain(error), "error");
    }
  };
  const load = async () => {
    try {
      const { batches } = await api("/batches");
      if (live !== mine) return;
      table.tBodies[0].replaceChildren(...batches.map((b) => batchRow(b, cancel)));
      // Live while one runs.
      if (batches.some((b) => b.status === "running")) mine.timer = setTimeout(load, LIVE_MS * 2);
    } catch (error) {
      if (live === mine) notice(explain(error), "error");
    }
  };
  load();
}

// ------------------------------------------------------------------ routing

function route() {
  notice("");
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const execution = path.match(/^\/executions\/(.+)$/);
  if (execution) executionView(decodeURIComponent(execution[1]));
  else if (path === "/submit") submitView();
  else if (path === "/routes") routesView();
  else if (path === "/batches") batchesView();
  else listView(new URLSearchParams(query || ""));
}

document.addEventListener("DOMContentLoaded", () => {
  const token = document.getElementById("token");
  token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (token.value.trim()) sessionStorage.setItem(TOKEN_KEY, token.value.trim());
    else sessionStorage.removeItem(TOKEN_KEY);
    route();
  });
  window.addEventListener("hashchange", route);
  route();
});
