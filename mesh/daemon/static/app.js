// The room page of agent-mesh: plain JavaScript, no build step, nothing from elsewhere.
//
// It signs in with a token (kept in this tab's sessionStorage), watches the agent
// table over /agents/events and one room over /rooms/{id}/events?deltas=1, and
// drives the room API. Every piece of text that came from an agent or a person is
// put on the page with textContent, never as markup.
"use strict";

const $ = (selector) => document.querySelector(selector);
const COLOURS = ["#2a7ab0", "#3a9a5b", "#a04aa8", "#c0642a", "#2f8f8f", "#8a6d1f", "#5a5fc8"];
const TOKEN_KEY = "mesh.token";
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  agents: new Map(),
  rooms: [],
  room: null, // the selected room's id
  watch: null, // its WebSocket
  welcome: null, // its configuration, from WELCOME (members grow with joins)
  lastSeq: 0,
  scores: [],
  writing: new Map(), // agent id -> the element of the reply being written
  me: null, // my member id in the selected room
  myTurn: null,
  stopped: false,
  roomsTimer: null,
  agentsWatch: null,
};

// -- talking to the daemon ---------------------------------------------------------------

class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  if (state.token) headers.authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) {
    signOut("The daemon wants a valid token.");
    throw new Refused(401, "not signed in");
  }
  if (response.status === 204) return null;
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (payload.error && payload.error.message) || `HTTP ${response.status}`;
    throw new Refused(response.status, message);
  }
  return payload;
}

function socketUrl(path, query) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const params = new URLSearchParams(query);
  if (state.token) params.set("token", state.token);
  return `${scheme}//${location.host}${path}?${params}`;
}

// -- signing in --------------------------------------------------------------------------

function showIdentity(who) {
  const badge = $("#whoami");
  badge.textContent = who ? `signed in as ${who.name} (${who.role})` : "";
  badge.hidden = !who;
}

// Who a token is, without signing in with it (null if the daemon does not know it).
async function whoIs(token) {
  const response = await fetch("/whoami", {
    headers: { accept: "application/json", authorization: `Bearer ${token}` },
  });
  return response.ok ? response.json() : null;
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
// a link signs in as whoever made it.
function takeLinkToken() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (!fromHash) return;
  history.replaceState(null, "", location.pathname);
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
  $("#signin").hidden = false;
  $("#signin-error").textContent = reason || "";
  setConnection("offline");
}

async function signIn(token) {
  state.token = token;
  try {
    await api("GET", "/rooms");
  } catch (error) {
    if (error.status !== 401) $("#signin-error").textContent = error.message;
    return;
  }
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  $("#signin").hidden = true;
  $("#app").hidden = false;
  $("#signout").hidden = !token;
  api("GET", "/whoami").then(showIdentity, () => showIdentity(null));
  watchAgents();
  refreshRooms();
  state.roomsTimer = setInterval(refreshRooms, 3000);
  const wanted = new URLSearchParams(location.hash.slice(1)).get("room");
  if (wanted) openRoom(wanted);
}

function setConnection(text) {
  const badge = $("#connection");
  badge.textContent = text;
  badge.className = `badge ${text}`;
}

// -- agents ------------------------------------------------------------------------------

function watchAgents() {
  const socket = new WebSocket(socketUrl("/agents/events", {}));
  state.agentsWatch = socket;
  socket.onopen = () => setConnection("online");
  socket.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (event.type === "snapshot") {
      state.agents.clear();
      for (const agent of event.agents) state.agents.set(agent.id, agent);
    } else if (event.agent) {
      state.agents.set(event.agent.id, event.agent);
    }
    renderAgents();
  };
  socket.onclose = (closed) => {
    if (state.agentsWatch !== socket) return;
    if (closed.code === 4001) return signOut("The daemon refused the token.");
    setConnection("connecting");
    setTimeout(() => state.agentsWatch === socket && watchAgents(), 1500);
  };
}

function renderAgents() {
  const body = $("#agents tbody");
  body.replaceChildren();
  const members = $("#new-members");
  const checked = new Set([...members.querySelectorAll("input:checked")].map((i) => i.value));
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
    listed = await api("GET", "/rooms");
  } catch {
    return;
  }
  state.rooms = listed.rooms;
  const list = $("#rooms");
  list.replaceChildren();
  for (const snapshot of [...state.rooms].reverse()) {
    const item = document.createElement("li");
    item.dataset.room = snapshot.room.id;
    item.classList.toggle("selected", snapshot.room.id === state.room);
    const topic = document.createElement("span");
    topic.className = "topic";
    topic.textContent = snapshot.room.topic;
    topic.title = snapshot.room.id;
    item.append(badge(snapshot.status), topic, small(`turn ${snapshot.current_turn}`));
    item.onclick = () => openRoom(snapshot.room.id);
    list.append(item);
  }
}

async function startRoom(submit) {
  submit.preventDefault();
  const members = [...$("#new-members").querySelectorAll("input:checked")].map((i) => i.value);
  const spec = { topic: $("#new-topic").value.trim(), members };
  const turns = parseInt($("#new-max-turns").value, 10);
  if (turns > 0) spec.limits = { max_turns: turns };
  $("#new-error").textContent = "";
  try {
    const created = await api("POST", "/rooms", spec);
    $("#new-topic").value = "";
    await refreshRooms();
    openRoom(created.room.id);
  } catch (error) {
    $("#new-error").textContent = error.message;
  }
}

function closeRoom() {
  if (state.watch) {
    const socket = state.watch;
    state.watch = null;
    socket.close();
  }
}

async function openRoom(id) {
  closeRoom();
  Object.assign(state, {
    room: id, welcome: null, lastSeq: 0, scores: [], stopped: false, myTurn: null,
  });
  state.writing.clear();
  state.me = sessionStorage.getItem(`mesh.member.${id}`);
  history.replaceState(null, "", `#room=${encodeURIComponent(id)}`);
  $("#room").hidden = false;
  $("#no-room").hidden = true;
  $("#transcript").replaceChildren();
  $("#room-error").textContent = "";
  $("#stop-reason").hidden = true;
  for (const item of document.querySelectorAll("#rooms li")) {
    item.classList.toggle("selected", item.dataset.room === id);
  }
  renderPeople();
  await showSnapshot();
  follow(id);
}

async function showSnapshot() {
  try {
    const shown = await api("GET", `/rooms/${encodeURIComponent(state.room)}`);
    renderStatus(shown.room);
  } catch (error) {
    $("#room-error").textContent = error.message;
  }
}

function follow(id) {
  const path = `/rooms/${encodeURIComponent(id)}/events`;
  const socket = new WebSocket(socketUrl(path, { since: state.lastSeq, deltas: 1 }));
  state.watch = socket;
  socket.onmessage = (message) => {
    if (state.watch === socket) onEvent(JSON.parse(message.data));
  };
  socket.onclose = (closed) => {
    if (state.watch !== socket) return;
    state.watch = null;
    if (closed.code === 4001) return signOut("The daemon refused the token.");
    if (closed.code === 4004) {
      $("#room-error").textContent = closed.reason || "no such room";
      return;
    }
    // A room that stopped for good ends its stream; any other close is a dropped link.
    if (!state.stopped) setTimeout(() => state.room === id && !state.watch && follow(id), 1500);
  };
}

function onEvent(event) {
  if (event.type === "DELTA") return onDelta(event);
  state.lastSeq = Math.max(state.lastSeq, event.seq);
  const list = $("#transcript");
  switch (event.type) {
    case "WELCOME":
      state.welcome = event.room;
      renderHead();
      return;
    case "AGENT_JOINED":
      if (event.member && state.welcome) state.welcome.members.push(event.member);
      renderHead();
      // A person's seat names the token that holds it: a look-alike cannot pass for them.
      return line(`${event.name} joined${event.by ? ` (token ${event.by})` : ""}`, "joined");
    case "AGENT_LEFT":
      clearWriting(event.agent_id);
      if (event.agent_id === state.me) setMyTurn(null);
      return line(`${event.name} left${event.reason ? ` (${event.reason})` : ""}`, "left");
    case "MESSAGE":
      clearWriting(event.agent_id);
      if (event.agent_id === state.me) setMyTurn(null);
      list.append(messageItem(event, false));
      if (!event.interjection) state.scores.push([event.turn, event.score]);
      renderChart();
      scrollDown();
      return;
    case "ERROR":
      clearWriting(event.agent_id);
      return line(`turn ${event.turn}, ${event.name}, attempt ${event.attempt}: ${event.message}`, "error");
    case "RESUMED":
      state.stopped = false;
      showSnapshot();
      return line(`resumed at turn ${event.next_turn}`, "resumed");
    case "STOPPED":
      for (const id of [...state.writing.keys()]) clearWriting(id);
      setMyTurn(null);
      state.stopped = event.reason !== "PAUSED";
      line(`stopped after turn ${event.turn}: ${event.reason}${event.detail ? ` (${event.detail})` : ""}`, "stopped");
      showSnapshot();
      refreshRooms();
      return;
    default:
      return undefined;
  }
}

function onDelta(event) {
  if (event.agent_id === state.me && event.text === "") return setMyTurn(event.turn);
  let item = state.writing.get(event.agent_id);
  if (!item) {
    item = messageItem({ ...event, text: "", score: null, timestamp: event.timestamp }, true);
    state.writing.set(event.agent_id, item);
    $("#transcript").append(item);
  }
  item.querySelector(".text").textContent += event.text;
  scrollDown();
}

function clearWriting(agentId) {
  const item = state.writing.get(agentId);
  if (item) item.remove();
  state.writing.delete(agentId);
}

// -- rendering ---------------------------------------------------------------------------

function member(agentId) {
  const members = state.welcome ? state.welcome.members : [];
  const index = members.findIndex((m) => m.id === agentId);
  return { index: Math.max(index, 0), info: members[index] };
}

function messageItem(event, writing) {
  const { index, info } = member(event.agent_id);
  const item = document.createElement("li");
  item.className = "message";
  item.classList.toggle("writing", writing);
  item.classList.toggle("person", Boolean(info && info.kind === "human"));
  item.dataset.turn = event.turn;
  item.dataset.agent = event.agent_id;
  item.style.setProperty("--who", COLOURS[index % COLOURS.length]);
  const head = document.createElement("div");
  head.className = "head";
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = event.name;
  const parts = [event.role, `turn ${event.turn}`];
  if (event.interjection) parts.push("between turns");
  if (event.step) parts.push(event.step);
  parts.push(clock(event.timestamp));
  if (writing) parts.push("writing…");
  else if (typeof event.score === "number") parts.push(`score ${event.score.toFixed(2)}`);
  head.append(name, ...parts.map((p) => small(p, "span")));
  const text = document.createElement("div");
  text.className = "text";
  text.textContent = event.text;
  item.append(head, text);
  return item;
}

function line(text, kind) {
  const item = document.createElement("li");
  item.className = `event ${kind}`;
  item.textContent = text;
  $("#transcript").append(item);
  scrollDown();
}

function renderHead() {
  const room = state.welcome;
  if (!room) return;
  $("#room-topic").textContent = room.topic;
  $("#room-id").textContent = room.id;
  $("#room-members").textContent = room.members.map((m) => `${m.name} (${m.role})`).join(", ");
}

function renderStatus(snapshot) {
  const status = $("#room-status");
  status.textContent = snapshot.status;
  status.className = `badge ${snapshot.status}`;
  const reason = $("#stop-reason");
  reason.hidden = !snapshot.stop_reason;
  reason.textContent = snapshot.stop_reason
    ? `${snapshot.stop_reason}${snapshot.detail ? `: ${snapshot.detail}` : ""}`
    : "";
  const finished = snapshot.status === "stopped" && !["AGENT_LOST", "ERROR"].includes(snapshot.stop_reason);
  $("#pause").disabled = snapshot.status !== "running";
  $("#resume").disabled = snapshot.status === "running" || finished;
  $("#stop").disabled = snapshot.status === "stopped";
  $("#join").disabled = snapshot.status === "stopped" || snapshot.room.mode === "review";
  $("#say").disabled = snapshot.status !== "running";
  if (!state.welcome) {
    state.welcome = snapshot.room;
    renderHead();
  }
}

function renderChart() {
  const svg = $("#chart");
  svg.replaceChildren();
  const points = state.scores;
  if (!points.length) return;
  const last = Math.max(points[points.length - 1][0], 2);
  const xy = points.map(([turn, score]) => [((turn - 1) / (last - 1)) * 296 + 2, 58 - score * 56]);
  const ns = "http://www.w3.org/2000/svg";
  const polyline = document.createElementNS(ns, "polyline");
  polyline.setAttribute("points", xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" "));
  svg.append(polyline);
  for (const [[x, y], [turn, score]] of xy.map((p, i) => [p, points[i]])) {
    const dot = document.createElementNS(ns, "circle");
    dot.setAttribute("cx", x.toFixed(1));
    dot.setAttribute("cy", y.toFixed(1));
    dot.setAttribute("r", "1.6");
    const title = document.createElementNS(ns, "title");
    title.textContent = `turn ${turn}: ${score.toFixed(2)}`;
    dot.append(title);
    svg.append(dot);
  }
}

function renderPeople() {
  const joined = Boolean(state.me);
  $("#join-form").hidden = joined;
  $("#say-form").hidden = !joined;
  setMyTurn(state.myTurn);
}

function setMyTurn(turn) {
  state.myTurn = turn;
  const hint = $("#say-hint");
  hint.classList.toggle("your-turn", turn !== null);
  hint.textContent = turn !== null
    ? `Your turn (turn ${turn}): the room is waiting for you.`
    : `You are in the room as ${state.me || "…"}; what you send now is said between turns.`;
}

// -- people ------------------------------------------------------------------------------

async function join(submit) {
  submit.preventDefault();
  $("#room-error").textContent = "";
  try {
    const joined = await api("POST", `/rooms/${encodeURIComponent(state.room)}/join`, {
      name: $("#join-name").value,
    });
    state.me = joined.member.id;
    sessionStorage.setItem(`mesh.member.${state.room}`, state.me);
    renderPeople();
  } catch (error) {
    $("#room-error").textContent = error.message;
  }
}

async function say(submit) {
  submit.preventDefault();
  const text = $("#say-text").value;
  $("#room-error").textContent = "";
  try {
    const said = await api("POST", `/rooms/${encodeURIComponent(state.room)}/say`, {
      member: state.me,
      text,
    });
    $("#say-text").value = "";
    if (said && said.status === "queued") {
      $("#say-hint").textContent = "Queued: it is said when the turn in flight ends.";
    }
  } catch (error) {
    $("#room-error").textContent = error.message;
  }
}

async function leave() {
  try {
    await api("POST", `/rooms/${encodeURIComponent(state.room)}/leave`, { member: state.me });
  } catch (error) {
    $("#room-error").textContent = error.message;
  }
  sessionStorage.removeItem(`mesh.member.${state.room}`);
  state.me = null;
  renderPeople();
}

async function control(action) {
  $("#room-error").textContent = "";
  try {
    renderStatus(await api("POST", `/rooms/${encodeURIComponent(state.room)}/${action}`));
    refreshRooms();
  } catch (error) {
    $("#room-error").textContent = error.message;
  }
}

// -- export ------------------------------------------------------------------------------

async function exportRoom(format) {
  const id = state.room;
  let text;
  if (format === "jsonl") {
    const events = await api("GET", `/rooms/${encodeURIComponent(id)}/events`);
    text = events.events.map((e) => JSON.stringify(e)).join("\n") + "\n";
  } else {
    const shown = await api("GET", `/rooms/${encodeURIComponent(id)}`);
    const room = shown.room.room;
    const lines = [`# ${room.topic}`, "", `- Room: \`${room.id}\` (${room.mode})`,
      `- Members: ${room.members.map((m) => `${m.name} (${m.role})`).join(", ")}`,
      `- Status: ${shown.room.status}${shown.room.stop_reason ? `, ${shown.room.stop_reason}` : ""}`, ""];
    for (const m of shown.transcript) {
      lines.push(`## Turn ${m.turn}: ${m.name} (${m.role})`, "", m.text, "");
    }
    text = lines.join("\n");
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
  link.download = `${id}.${format}`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
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

function clock(timestamp) {
  return new Date(timestamp).toLocaleTimeString([], { hour12: false });
}

function scrollDown() {
  const list = $("#transcript");
  list.scrollTop = list.scrollHeight;
}

// -- wiring ------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("#signin-form").onsubmit = (submit) => {
    submit.preventDefault();
    signIn($("#token").value.trim());
  };
  $("#signout").onclick = () => signOut("");
  $("#new-room").onsubmit = startRoom;
  $("#join-form").onsubmit = join;
  $("#say-form").onsubmit = say;
  $("#leave").onclick = leave;
  for (const action of ["pause", "resume", "stop"]) $(`#${action}`).onclick = () => control(action);
  $("#export-md").onclick = () => exportRoom("md");
  $("#export-jsonl").onclick = () => exportRoom("jsonl");
  takeLinkToken();
  window.addEventListener("hashchange", takeLinkToken);
  signIn(state.token);
});
