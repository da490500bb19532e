// The room page of agent-mesh: plain JavaScript, no build step, nothing from elsewhere.
//
// This file signs in with a token (kept in this tab's sessionStorage), tells whether
// the daemon is reachable, watches the agent table over /agents/events, lists the
// rooms and starts new ones; room.js shows one room and lets a person take part.
// Every piece of text that came from an agent or a person is put on the page with
// textContent, never as markup.
"use strict";

const $ = (selector) => document.querySelector(selector);
const TOKEN_KEY = "mesh.token";
const TITLE = document.title;
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  who: null, // /whoami: {id, name, role}
  online: false, // is the daemon reachable (its agents socket open)?
  agents: new Map(),
  rooms: [],
  room: null, // the selected room's id
  watch: null, // its WebSocket
  welcome: null, // its configuration, from WELCOME (members grow with joins)
  snapshot: null, // its last status, from GET /rooms/{id}
  lastSeq: 0,
  scores: [],
  writing: new Map(), // member id -> the element of the reply being written
  me: null, // my member id in the selected room
  myTurn: null, // {turn, deadline} while the room waits for me
  question: null, // the QUESTION a member put to the room's people, while it is open
  away: "", // why I am out of the speaking order, if I am
  stopped: false,
  roomsTimer: null,
  agentsWatch: null,
  agentsSnapshotMore: false, // a page of the agents' snapshot came, and more follow
};

// -- talking to the daemon ---------------------------------------------------------------

class Refused extends Error {
  constructor(status, message, data = null) {
    super(message);
    this.status = status;
    this.data = data; // the error's `data`: `{limit, max}` names a bound the daemon holds
  }
}

const UNREACHABLE = "Not sent: the daemon is not reachable. Try again when the page is back online.";

async function api(method, path, body, accept = "application/json") {
  const headers = { accept };
  if (state.token) headers.authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    setOnline(false); // a network error: the daemon is down or restarting
    throw new Refused(0, UNREACHABLE);
  }
  if (response.status === 401) {
    signOut("The daemon refused the token: sign in again.");
    throw new Refused(401, "not signed in");
  }
  if (response.status === 204) return null;
  if (response.ok && accept !== "application/json") return response.text();
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (payload.error && payload.error.message) || `HTTP ${response.status}`;
    throw new Refused(response.status, message, (payload.error && payload.error.data) || null);
  }
  return payload;
}

// The token travels as a WebSocket subprotocol (`bearer.<token>` beside `mesh`, which the
// daemon selects), never in the URL, where consoles and logs would show it.
function openSocket(path, query) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const params = new URLSearchParams(query);
  const query_ = params.toString();
  const url = `${scheme}//${location.host}${path}${query_ ? `?${query_}` : ""}`;
  return new WebSocket(url, state.token ? ["mesh", `bearer.${state.token}`] : []);
}

// -- who is signed in, and what they may do ----------------------------------------------

function showIdentity(who) {
  state.who = who;
  const badge = $("#whoami");
  badge.textContent = who ? `signed in as ${who.name} (${who.role})` : "";
  badge.hidden = !who;
  // Only what the token may do is offered: an observer watches.
  $("#new-room-box").hidden = !mayCreate();
  // A room's seconds per reply are a deadline: the daemon's bound is the field's.
  if (who && who.max_call_timeout) $("#new-turn-timeout").max = String(who.max_call_timeout);
  if (state.room) renderControls();
}

function mayCreate() {
  return Boolean(state.who) && ["admin", "client"].includes(state.who.role);
}

function owns(room) {
  const who = state.who;
  return Boolean(who) && (who.role === "admin" || (who.id && (room.owner || "").split("@")[0] === `token:${who.id}`));
}

function mayJoin(room) {
  if (!mayCreate() || room.mode === "review") return false;
  const rule = room.people ? room.people.join : "owner";
  if (owns(room) || rule === "clients") return true;
  return Array.isArray(rule) && rule.includes(state.who.name);
}

// Who a token is, without signing in with it (null if the daemon does not know it).
async function whoIs(token) {
  const response = await fetch("/whoami", {
    headers: { accept: "application/json", authorization: `Bearer ${token}` },
  }).catch(() => null);
  return response && response.ok ? response.json() : null;
}

// A token in a link is someone's: the page says whose, and signs in only if asked to.
async function offerLink(token) {
  if (token === state.token) return;
  const who = await whoIs(token);
  if (!who) {
    $("#signin-error").textContent = "The link's token is not valid here.";
    return;
  }
  $("#link-name").textContent = who.name;
  $("#link-role").textContent = who.role;
  $("#link-accept-name").textContent = who.name;
  $("#link-offer").hidden = false;
  $("#link-accept").onclick = () => {
    $("#link-offer").hidden = true;
    if (state.token) signOut("");
    signIn(token);
  };
  $("#link-decline").onclick = () => {
    $("#link-offer").hidden = true;
  };
}

// A token in the address (#token=...) is taken out of it and offered, never used unasked:
// a link signs in as whoever made it. The room it names (&room=ID) stays.
function takeLinkToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const fromHash = fragment.get("token");
  if (!fromHash) return;
  fragment.delete("token");
  const rest = fragment.toString();
  history.replaceState(null, "", `${location.pathname}${rest ? `#${rest}` : ""}`);
  offerLink(fromHash);
}

function signOut(reason) {
  showIdentity(null);
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = "";
  closeRoom();
  const agents = state.agentsWatch;
  state.agentsWatch = null;
  if (agents) agents.close();
  clearInterval(state.roomsTimer);
  $("#app").hidden = true;
  $("#signout").hidden = true;
  $("#offline").hidden = true;
  state.online = false;
  document.body.classList.remove("stale");
  showSignIn(reason);
}

// Not signed in: the prompt, and whether the daemon is up (GET /health needs no token).
function showSignIn(reason) {
  $("#signin").hidden = false;
  $("#signin-error").textContent = reason || "";
  setConnection("signed out");
  fetch("/health").then(
    (r) => !state.token && setConnection(r.ok ? "signed out" : "offline"),
    () => !state.token && setConnection("offline"),
  );
}

async function signIn(token) {
  if (!token) return showSignIn("");
  state.token = token;
  let who;
  try {
    who = await api("GET", "/whoami");
  } catch (error) {
    if (error.status !== 401) $("#signin-error").textContent = error.message;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#signin").hidden = true;
  $("#app").hidden = false;
  $("#signout").hidden = false;
  showIdentity(who);
  watchAgents();
  refreshRooms();
  state.roomsTimer = setInterval(refreshRooms, 3000);
  const wanted = new URLSearchParams(location.hash.slice(1)).get("room");
  if (wanted) openRoom(wanted);
}

function setConnection(text) {
  const badge = $("#connection");
  badge.textContent = text;
  badge.className = `badge ${text.replace(/\W+/g, "-")}`;
}

// The daemon went away or came back: everything the page shows from it says so.
function setOnline(online) {
  if (state.online === online) return;
  state.online = online;
  setConnection(online ? "online" : "reconnecting");
  $("#offline").hidden = online;
  document.body.classList.toggle("stale", !online);
  if (online) {
    if ($("#room-error").textContent === UNREACHABLE) $("#room-error").textContent = "";
    if (state.room) setMyTurn(state.myTurn);
    if (state.room) showSnapshot();
    refreshRooms();
  } else {
    for (const row of document.querySelectorAll("#agents .badge")) {
      row.textContent = "unknown";
      row.className = "badge unknown";
    }
    if (state.room) roomOffline();
  }
}

// -- agents ------------------------------------------------------------------------------

function watchAgents() {
  const socket = openSocket("/agents/events", {});
  state.agentsWatch = socket;
  state.agentsSnapshotMore = false;
  socket.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (event.type === "snapshot") {
      // A large mesh's snapshot comes a page at a time: the first page starts afresh.
      if (!state.agentsSnapshotMore) state.agents.clear();
      for (const agent of event.agents) state.agents.set(agent.id, agent);
      state.agentsSnapshotMore = Boolean(event.more);
      setOnline(true);
    } else if (event.agent) {
      state.agents.set(event.agent.id, event.agent);
    }
    renderAgents();
  };
  socket.onclose = (closed) => {
    if (state.agentsWatch !== socket) return;
    if (closed.code === 4001) return signOut("The daemon refused the token: sign in again.");
    setOnline(false);
    setTimeout(() => state.agentsWatch === socket && watchAgents(), 1500);
  };
}

function renderAgents() {
  const body = $("#agents tbody");
  const members = $("#new-members");
  const checked = new Set([...members.querySelectorAll("input:checked")].map((i) => i.value));
  body.replaceChildren();
  members.querySelectorAll("label").forEach((label) => label.remove());
  for (const agent of [...state.agents.values()].sort((a, b) => a.id.localeCompare(b.id))) {
    const row = document.createElement("tr");
    row.dataset.agent = agent.id;
    const who = cell(agent.name || agent.id);
    if (agent.name && agent.name !== agent.id) who.append(small(agent.id));
    const status = cell("");
    status.append(badge(agent.status));
    if (agent.link_error) status.append(small(agent.link_error));
    row.append(who, status, cell(agent.transport || ""));
    body.append(row);
    // Members are agents that can take turns: persona agents declare the `chat` capability.
    const chats = (agent.capabilities || []).includes("chat");
    if ((agent.status === "online" && chats) || checked.has(agent.id)) {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = agent.id;
      box.checked = checked.has(agent.id);
      label.append(box, document.createTextNode(` ${agent.name || agent.id}`));
      members.append(label);
    }
  }
}

// -- rooms -------------------------------------------------------------------------------

async function refreshRooms() {
  let listed;
  try {
    listed = await api("GET", "/rooms"); // the newest page (100 rooms)
  } catch {
    return;
  }
  state.rooms = listed.rooms;
  const list = $("#rooms");
  const focused = document.activeElement && document.activeElement.closest("#rooms li");
  const keep = focused ? focused.dataset.room : null;
  list.replaceChildren();
  for (const snapshot of state.rooms) {
    // A button: reached with Tab, opened with Enter or Space.
    const item = document.createElement("li");
    item.dataset.room = snapshot.room.id;
    item.classList.toggle("selected", snapshot.room.id === state.room);
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open-room";
    open.title = snapshot.room.id;
    if (snapshot.room.id === state.room) open.setAttribute("aria-current", "true");
    const topic = small(snapshot.room.topic, "span");
    topic.className = "topic";
    const turn = small(`turn ${snapshot.current_turn}`);
    turn.className = "turn";
    open.append(badge(snapshot.status), topic, turn);
    open.onclick = () => openRoom(snapshot.room.id);
    item.append(open);
    list.append(item);
  }
  if (keep) {
    const again = list.querySelector(`li[data-room="${CSS.escape(keep)}"] button`);
    if (again) again.focus();
  }
}

// A number field's value (null when empty). Text the browser cannot read as a number
// is refused here: the field would otherwise read as empty and be silently left out.
function numberOf(selector) {
  const input = $(selector);
  if (input.validity.badInput) {
    throw new FieldError(input, `${labelOf(input)}: "${input.value}" is not a number`);
  }
  const value = input.value.trim();
  return value === "" ? null : Number(value);
}

function labelOf(input) {
  const label = input.closest("label");
  return label ? label.firstChild.textContent.trim() : input.id;
}

class FieldError extends Error {
  constructor(input, message) {
    super(message);
    this.input = input;
  }
}

// Which field of the form a path in the daemon's refusal (`at $.limits.reply_tokens`) names.
const SPEC_FIELDS = {
  "$.topic": "#new-topic",
  "$.limits.max_turns": "#new-max-turns",
  "$.limits.max_messages_per_agent": "#new-per-agent",
  "$.limits.turn_timeout": "#new-turn-timeout",
  "$.limits.context_messages": "#new-context",
  "$.limits.reply_tokens": "#new-reply-tokens",
  "$.limits.context_tokens": "#new-context-tokens",
  "$.limits.redraws": "#new-redraws",
  "$.rules.goodbye": "#new-goodbye",
  "$.rules.verifier": "#new-verifier",
  "$.rules.convergence_threshold": "#new-threshold",
  "$.rules.repetition_threshold": "#new-repetition",
  "$.rules.agent_grace": "#new-grace",
  "$.people.turn_timeout": "#new-person-timeout",
  "$.seed": "#new-seed",
};

// Which field a bound the daemon holds (an error's `data.limit`) is set in.
const LIMIT_FIELDS = { max_call_timeout: "#new-turn-timeout" };

function fieldOf(error) {
  const limit = error.data && LIMIT_FIELDS[error.data.limit];
  if (limit) return $(limit);
  const at = /at `(\$[\w.]+)`/.exec(error.message);
  return at && SPEC_FIELDS[at[1]] ? $(SPEC_FIELDS[at[1]]) : null;
}

// The room spec from the form: what is left empty keeps the daemon's default.
function newRoomSpec() {
  const members = [...$("#new-members").querySelectorAll("input:checked")].map((i) => i.value);
  const spec = { topic: $("#new-topic").value.trim(), members };
  const limits = {};
  const rules = { no_improvement: $("#new-no-improvement").checked };
  const people = {
    at_timeout: $("#new-at-timeout").value,
    interject: $("#new-interject").checked,
    join: $("#new-join").value,
  };
  const put = (target, key, value) => value !== null && (target[key] = value);
  put(limits, "max_turns", numberOf("#new-max-turns"));
  put(limits, "max_messages_per_agent", numberOf("#new-per-agent"));
  put(limits, "turn_timeout", numberOf("#new-turn-timeout"));
  put(limits, "context_messages", numberOf("#new-context"));
  put(limits, "reply_tokens", numberOf("#new-reply-tokens"));
  put(limits, "context_tokens", numberOf("#new-context-tokens"));
  put(limits, "redraws", numberOf("#new-redraws"));
  rules.goodbye = $("#new-goodbye").value.trim() || null;
  put(rules, "verifier", $("#new-verifier").value.trim() || null);
  put(rules, "convergence_threshold", numberOf("#new-threshold"));
  put(rules, "repetition_threshold", numberOf("#new-repetition"));
  put(rules, "agent_grace", numberOf("#new-grace"));
  put(people, "turn_timeout", numberOf("#new-person-timeout"));
  put(spec, "seed", numberOf("#new-seed"));
  return Object.assign(spec, { limits, rules, people });
}

// The form is `novalidate`: the daemon checks every value and its refusal, which names the
// setting and its bound, is shown under the form, with the field it names marked and focused.
async function startRoom(submit) {
  submit.preventDefault();
  $("#new-error").textContent = "";
  for (const marked of $("#new-room").querySelectorAll("[aria-invalid]")) {
    marked.removeAttribute("aria-invalid");
    marked.removeAttribute("aria-errormessage");
  }
  try {
    if (!$("#new-topic").value.trim()) throw new FieldError($("#new-topic"), "Write a topic.");
    const created = await api("POST", "/rooms", newRoomSpec());
    $("#new-topic").value = "";
    await refreshRooms();
    openRoom(created.room.id);
  } catch (error) {
    $("#new-error").textContent = error.message;
    const field = error.input || fieldOf(error);
    if (field) {
      field.setAttribute("aria-invalid", "true");
      field.setAttribute("aria-errormessage", "new-error");
      const tuning = field.closest("details");
      if (tuning) tuning.open = true;
      field.focus();
    }
  }
}

// -- small helpers -----------------------------------------------------------------------

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

function small(text, tag = "small") {
  const element = document.createElement(tag === "span" ? "span" : "small");
  element.textContent = text;
  return element;
}

function badge(text) {
  const element = document.createElement("span");
  element.className = `badge ${text}`;
  element.textContent = text;
  return element;
}

// -- wiring ------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("#signin-form").onsubmit = (submit) => {
    submit.preventDefault();
    signIn($("#token").value.trim());
  };
  $("#signout").onclick = () => signOut("");
  $("#new-room").onsubmit = startRoom;
  wireRoom();
  takeLinkToken();
  window.addEventListener("hashchange", takeLinkToken);
  signIn(state.token);
});
