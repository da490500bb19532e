// One room on the page: its events over /rooms/{id}/events (with the replies being
// written), its status and controls, and a person taking part (join, answer, pass, and
// answer a member's question to the room's people).
// Shares `state`, `$`, `api` and `openSocket` with app.js, which loads first.
"use strict";

const COLOURS = ["#2a7ab0", "#2f7d4a", "#8e3f96", "#a4501c", "#23737a", "#6f5a14", "#4b50b8"];

function closeRoom() {
  if (state.watch) {
    const socket = state.watch;
    state.watch = null;
    socket.close();
  }
  setMyTurn(null);
}

async function openRoom(id) {
  closeRoom();
  Object.assign(state, {
    room: id, welcome: null, snapshot: null, lastSeq: 0, scores: [], stopped: false, away: "",
    question: null,
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
    const selected = item.dataset.room === id;
    item.classList.toggle("selected", selected);
    const button = item.querySelector("button");
    if (selected) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
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
    if (error.status !== 0) $("#room-error").textContent = error.message;
  }
}

function follow(id) {
  const path = `/rooms/${encodeURIComponent(id)}/events`;
  const socket = openSocket(path, { since: state.lastSeq, deltas: 1 });
  state.watch = socket;
  socket.onopen = () => {
    if (state.watch !== socket) return;
    showSnapshot();
    takeSeatAgain();
  };
  socket.onmessage = (message) => {
    if (state.watch === socket) onEvent(JSON.parse(message.data));
  };
  socket.onclose = (closed) => {
    if (state.watch !== socket) return;
    state.watch = null;
    // What was being written is gone with the link: a reply asked again starts afresh.
    dropWriting();
    if (closed.code === 4001) return signOut("The daemon refused the token: sign in again.");
    if (closed.code === 4004) {
      $("#room-error").textContent = closed.reason || "no such room";
      return;
    }
    // A room that stopped for good ends its stream; any other close is a dropped link.
    if (!state.stopped) {
      roomOffline();
      setTimeout(() => state.room === id && !state.watch && follow(id), 1500);
    }
  };
}

// The daemon forgets who is present when it restarts: a person whose page follows the
// room takes their seat again (a seat already held is simply theirs; nothing is recorded).
async function takeSeatAgain() {
  const name = sessionStorage.getItem(`mesh.member-name.${state.room}`);
  const snapshot = state.snapshot;
  if (!state.me || !name || (snapshot && snapshot.status === "stopped")) return;
  try {
    await api("POST", `/rooms/${encodeURIComponent(state.room)}/join`, { name });
  } catch (error) {
    if (error.status === 0 || error.status === 409) return; // down again, or stopped
    forgetSeat();
    $("#room-error").textContent = `You are no longer in the room: ${error.message}`;
  }
}

function roomOffline() {
  dropWriting();
  setMyTurn(null);
  const status = $("#room-status");
  status.textContent = "unknown";
  status.className = "badge unknown";
  status.title = "the daemon is not reachable: this is what was last known";
  renderControls();
}

function onEvent(event) {
  if (event.type === "DELTA") return onDelta(event);
  state.lastSeq = Math.max(state.lastSeq, event.seq);
  switch (event.type) {
    case "WELCOME":
      state.welcome = event.room;
      renderHead();
      renderControls();
      return;
    case "AGENT_JOINED":
      if (event.member && state.welcome) state.welcome.members.push(event.member);
      if (event.agent_id === state.me) state.away = "";
      renderHead();
      renderPeople();
      // A person's seat names the token that holds it: a look-alike cannot pass for them.
      return line(`${event.name} joined${event.by ? ` (token ${event.by})` : ""}`, "joined");
    case "AGENT_LEFT":
      clearWriting(event.agent_id);
      if (event.agent_id === state.me) {
        state.away = event.reason && event.reason !== "left" ? event.reason : "you left";
        setMyTurn(null);
      }
      return line(`${event.name} left${event.reason && event.reason !== "left" ? ` (${event.reason})` : ""}`, "left");
    case "MESSAGE":
      clearWriting(event.agent_id);
      if (event.agent_id === state.me) {
        state.away = "";
        setMyTurn(null);
      }
      $("#transcript").append(messageItem(event, false));
      if (!event.interjection) state.scores.push([event.turn, event.score]);
      showListedTurn(event.turn);
      renderChart();
      scrollDown();
      return;
    case "ERROR":
      clearWriting(event.agent_id);
      return line(`turn ${event.turn}, ${event.name}, attempt ${event.attempt}: ${event.message}`, "error");
    case "POINT":
      return line(pointLine(event), "point");
    case "QUESTION":
      return onQuestion(event);
    case "ANSWER":
      return onAnswer(event);
    case "RESUMED":
      state.stopped = false;
      showSnapshot();
      return line(`resumed at turn ${event.next_turn}`, "resumed");
    case "STOPPED":
      dropWriting();
      setMyTurn(null);
      state.stopped = event.reason !== "PAUSED";
      line(stoppedLine(event), "stopped");
      showSnapshot();
      refreshRooms();
      return;
    default:
      return undefined;
  }
}

// The rooms list says how far the open room is: it follows the room's own messages, not
// only the list's last fetch.
function showListedTurn(turn) {
  const item = document.querySelector(`#rooms li[data-room="${CSS.escape(state.room)}"] .turn`);
  if (item) item.textContent = `turn ${turn}`;
}

// An agenda's point: the room is on it from here on (and why it moved on, if it did).
function pointLine(event) {
  const of = state.welcome && state.welcome.agenda ? ` of ${state.welcome.agenda.length}` : "";
  const head = event.index === 0 ? "point" : "next point";
  const detail = event.detail ? ` (${event.detail})` : "";
  return `${head}, ${event.index + 1}${of}: ${event.point}${detail}`;
}

function stoppedLine(event) {
  const detail = event.detail ? ` (${event.detail})` : "";
  if (event.reason === "PAUSED") return `paused after turn ${event.turn}${detail}`;
  return `stopped after turn ${event.turn}: ${event.reason}${detail}`;
}

// A piece of a reply: `at` places it, so a piece seen twice lands on itself, and the reply
// so far (sent at 0 to a page arriving mid-reply) is whole. An empty piece opens a turn.
function onDelta(event) {
  if (event.text === "") {
    clearWriting(event.agent_id);
    if (event.agent_id === state.me) return setMyTurn({ turn: event.turn, ...countdown(event) });
    if (state.myTurn) setMyTurn(null); // someone else's turn now: mine passed or ran out
  }
  let item = state.writing.get(event.agent_id);
  if (!item) {
    item = messageItem({ ...event, text: "", score: null }, true);
    state.writing.set(event.agent_id, item);
    $("#transcript").append(item);
  }
  const text = item.querySelector(".text");
  text.textContent = text.textContent.slice(0, event.at || 0) + event.text;
  scrollDown();
}

// A person's deadline, on this browser's clock (the daemon's may differ from it).
function countdown(event) {
  if (!event.deadline) return { until: null };
  return { until: Date.now() + Math.max(0, event.deadline - event.timestamp) };
}

// The turn a person's waiting bubble stands for, with its countdown; null if none waits.
function waitingTurn(agentId) {
  const item = state.writing.get(agentId);
  if (!item || !item.classList.contains("waiting")) return null;
  const left = item.querySelector(".left");
  return { turn: Number(item.dataset.turn), until: left ? Number(left.dataset.until) : null };
}

function clearWriting(agentId) {
  const item = state.writing.get(agentId);
  if (item) item.remove();
  state.writing.delete(agentId);
}

function dropWriting() {
  for (const id of [...state.writing.keys()]) clearWriting(id);
}

// -- rendering ---------------------------------------------------------------------------

function member(agentId) {
  const members = state.welcome ? state.welcome.members : [];
  const index = members.findIndex((m) => m.id === agentId);
  return { index: Math.max(index, 0), info: members[index] };
}

function messageItem(event, writing) {
  const { index, info } = member(event.agent_id);
  const person = Boolean(info && info.kind === "human");
  const item = document.createElement("li");
  item.className = "message";
  item.classList.toggle("writing", writing && !person);
  item.classList.toggle("waiting", writing && person);
  item.classList.toggle("person", person);
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
  if (event.timestamp) parts.push(clock(event.timestamp));
  if (writing && person) parts.push("the room waits for their message");
  else if (writing) parts.push("writing…");
  else if (typeof event.score === "number") parts.push(`score ${event.score.toFixed(2)}`);
  head.append(name, ...parts.map((p) => small(p, "span")));
  const { until } = writing && person ? countdown(event) : { until: null };
  if (until) {
    const left = small("", "span");
    left.className = "left";
    left.dataset.until = until;
    head.append(left);
  }
  const text = document.createElement("div");
  text.className = "text";
  text.textContent = event.text;
  item.append(head, text);
  tick();
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
  state.snapshot = snapshot;
  const status = $("#room-status");
  status.textContent = snapshot.status;
  status.className = `badge ${snapshot.status}`;
  status.title = "";
  const reason = $("#stop-reason");
  reason.hidden = !snapshot.stop_reason;
  const why = snapshot.stop_reason === "PAUSED" ? "Paused" : snapshot.stop_reason;
  reason.textContent = snapshot.stop_reason ? `${why}${snapshot.detail ? `: ${snapshot.detail}` : ""}` : "";
  if (!state.welcome) {
    state.welcome = snapshot.room;
    renderHead();
  }
  renderControls();
}

// Only what the signed-in token may do is offered; nothing is offered while offline.
function renderControls() {
  const snapshot = state.snapshot;
  const room = state.welcome || (snapshot && snapshot.room);
  if (!room) return;
  const status = state.online && snapshot ? snapshot.status : "unknown";
  const finished = status === "stopped" && !["AGENT_LOST", "ERROR"].includes(snapshot.stop_reason);
  const steer = owns(room);
  for (const id of ["#pause", "#resume", "#stop"]) $(id).hidden = !steer;
  $("#pause").disabled = status !== "running";
  $("#resume").disabled = status === "running" || status === "unknown" || finished;
  $("#stop").disabled = status === "stopped" || status === "unknown";
  $("#people").hidden = !state.me && !mayJoin(room);
  $("#join").disabled = status === "stopped" || status === "unknown";
  $("#say").disabled = status !== "running";
  $("#pass").disabled = status !== "running";
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
  renderQuestion();
  setMyTurn(state.myTurn);
  renderControls();
}

// The room waits for me: the page says so in the hint and the tab's title, offers a
// pass, counts down to the deadline and puts the cursor in the box.
function setMyTurn(turn) {
  const was = state.myTurn;
  state.myTurn = turn;
  const hint = $("#say-hint");
  hint.classList.toggle("your-turn", turn !== null);
  $("#pass").hidden = turn === null;
  document.title = turn !== null ? `Your turn · ${TITLE}` : TITLE;
  hint.replaceChildren();
  if (state.online === false) {
    // Send is disabled until the daemon is back: the hint must not promise otherwise.
    hint.append("The daemon is not reachable: nothing can be sent until it is back.");
  } else if (turn !== null) {
    hint.append(`Your turn (turn ${turn.turn}): the room is waiting for you. Send, or pass.`);
    if (turn.until) {
      const left = small("", "span");
      left.className = "left";
      left.dataset.until = turn.until;
      hint.append(" ", left);
      tick();
    }
    if (!was || was.turn !== turn.turn) $("#say-text").focus();
  } else if (state.away) {
    hint.append(`You are out of the speaking order (${state.away}): what you send brings you back.`);
  } else {
    const name = sessionStorage.getItem(`mesh.member-name.${state.room}`) || state.me || "…";
    hint.append(`You are in the room as ${name}; what you send now is said between turns.`);
  }
}

// Every countdown on the page, once a second.
function tick() {
  for (const left of document.querySelectorAll("[data-until]")) {
    const seconds = Math.max(0, Math.round((Number(left.dataset.until) - Date.now()) / 1000));
    const shown = `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")} left`;
    if (left.textContent !== shown) left.textContent = shown;
  }
}

// -- people ------------------------------------------------------------------------------

function forgetSeat() {
  sessionStorage.removeItem(`mesh.member.${state.room}`);
  sessionStorage.removeItem(`mesh.member-name.${state.room}`);
  state.me = null;
  state.away = "";
  setMyTurn(null);
  renderPeople();
}

async function join(submit) {
  submit.preventDefault();
  $("#room-error").textContent = "";
  const name = $("#join-name").value;
  try {
    const joined = await api("POST", `/rooms/${encodeURIComponent(state.room)}/join`, { name });
    state.me = joined.member.id;
    sessionStorage.setItem(`mesh.member.${state.room}`, state.me);
    sessionStorage.setItem(`mesh.member-name.${state.room}`, joined.member.name);
    // The room may have turned to me before this answer arrived (the events come on the
    // socket, this answer on its own connection): then my turn's bubble already waits.
    state.myTurn = waitingTurn(state.me);
    renderPeople();
    $("#say-text").focus();
  } catch (error) {
    $("#room-error").textContent = error.message;
  }
}

async function say(submit) {
  submit.preventDefault();
  const text = $("#say-text").value;
  if (!text.trim()) return;
  $("#room-error").textContent = "";
  try {
    const said = await api("POST", `/rooms/${encodeURIComponent(state.room)}/say`, {
      member: state.me,
      text,
    });
    $("#say-text").value = "";
    if (said && said.status === "turn") setMyTurn(null);
    if (said && said.status === "queued") {
      $("#say-hint").textContent = "Queued: it is said when the turn in flight ends.";
    }
  } catch (error) {
    $("#room-error").textContent = error.message; // the text stays in the box
  }
}

async function passTurn() {
  const turn = state.myTurn;
  $("#room-error").textContent = "";
  try {
    await api("POST", `/rooms/${encodeURIComponent(state.room)}/say`, {
      member: state.me,
      pass: true,
    });
    setMyTurn(null);
    if (turn) line(`you passed turn ${turn.turn}`, "passed");
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
  forgetSeat();
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

// Enter sends (so does Ctrl+Enter); Shift+Enter is a new line.
function sendOnEnter(key) {
  if (key.key !== "Enter" || key.shiftKey || key.isComposing) return;
  key.preventDefault();
  $("#say-form").requestSubmit();
}

// -- export ------------------------------------------------------------------------------

async function exportRoom(format) {
  const id = encodeURIComponent(state.room);
  let text;
  try {
    if (format === "jsonl") {
      const events = await api("GET", `/rooms/${id}/events`);
      text = events.events.map((e) => JSON.stringify(e)).join("\n") + "\n";
    } else {
      // The daemon renders it, as `mesh room export --format md` prints it.
      text = await api("GET", `/rooms/${id}/events?format=md`, undefined, "text/markdown");
    }
  } catch (error) {
    $("#room-error").textContent = error.message;
    return;
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
  link.download = `${state.room}.${format}`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

function clock(timestamp) {
  return new Date(timestamp).toLocaleTimeString([], { hour12: false });
}

function scrollDown() {
  const list = $("#transcript");
  list.scrollTop = list.scrollHeight;
}

// -- a member's question to the room's people ---------------------------------------------

function onQuestion(event) {
  state.question = event;
  line(`${event.name} asks the room's people (question ${event.question}): ${event.message}`, "question");
  renderQuestion();
}

function onAnswer(event) {
  if (state.question && state.question.question === event.question) state.question = null;
  const content = event.content
    ? `: ${Object.entries(event.content).map(([k, v]) => `${k}=${v}`).join(", ")}`
    : "";
  const how = event.action === "withdrawn"
    ? `question ${event.question} withdrawn: ${event.reason}`
    : `${event.name} answered question ${event.question}, ${event.action}${content}`;
  line(how, "answer");
  renderQuestion();
}

// The form of the open question, for a person in the room: one field per property of its
// schema, built as elements (never markup: the schema is an agent's text).
function renderQuestion() {
  const form = $("#question-form");
  const question = state.question;
  form.hidden = !question || !state.me;
  if (!question) delete form.dataset.question; // the next question gets a new form
  if (form.hidden || form.dataset.question === question.question) return;
  form.dataset.question = question.question;
  $("#question-text").textContent = `${question.name} asks: ${question.message}`;
  const properties = (question.schema && question.schema.properties) || {};
  const required = new Set(question.schema.required || []);
  $("#question-fields").replaceChildren(
    ...Object.entries(properties).map(([name, spec]) => questionField(name, spec, required.has(name))),
  );
}

function questionField(name, spec, required) {
  const label = document.createElement("label");
  label.textContent = spec.title || name;
  let input;
  if (spec.type === "string" && Array.isArray(spec.enum)) {
    input = document.createElement("select");
    for (const value of spec.enum) {
      const option = document.createElement("option");
      option.value = option.textContent = String(value);
      input.append(option);
    }
  } else {
    input = document.createElement("input");
    const kinds = { boolean: "checkbox", integer: "number", number: "number" };
    input.type = kinds[spec.type] || "text";
    if (spec.type === "number") input.step = "any";
  }
  if (spec.default !== undefined) {
    if (input.type === "checkbox") input.checked = Boolean(spec.default);
    else input.value = String(spec.default);
  }
  input.dataset.field = name;
  input.dataset.kind = spec.type;
  input.required = required && spec.type !== "boolean";
  label.append(" ", input);
  return label;
}

function questionContent() {
  const content = {};
  for (const input of document.querySelectorAll("#question-fields [data-field]")) {
    const { field, kind } = input.dataset;
    if (kind === "boolean") content[field] = input.checked;
    else if (input.value === "") continue;
    else if (kind === "integer") content[field] = Number.parseInt(input.value, 10);
    else if (kind === "number") content[field] = Number(input.value);
    else if (kind === "array") content[field] = input.value.split(",").map((v) => v.trim()).filter(Boolean);
    else content[field] = input.value;
  }
  return content;
}

async function answerQuestion(action) {
  const question = state.question;
  if (!question) return;
  $("#room-error").textContent = "";
  const body = { member: state.me, question: question.question, action };
  if (action === "accept") body.content = questionContent();
  try {
    await api("POST", `/rooms/${encodeURIComponent(state.room)}/answer`, body);
  } catch (error) {
    $("#room-error").textContent = error.message; // the form stays, for another try
  }
}

function wireRoom() {
  $("#question-form").onsubmit = (submit) => {
    submit.preventDefault();
    answerQuestion("accept");
  };
  $("#question-decline").onclick = () => answerQuestion("decline");
  $("#question-cancel").onclick = () => answerQuestion("cancel");
  $("#join-form").onsubmit = join;
  $("#say-form").onsubmit = say;
  $("#say-text").addEventListener("keydown", sendOnEnter);
  $("#pass").onclick = passTurn;
  $("#leave").onclick = leave;
  for (const action of ["pause", "resume", "stop"]) $(`#${action}`).onclick = () => control(action);
  $("#export-md").onclick = () => exportRoom("md");
  $("#export-jsonl").onclick = () => exportRoom("jsonl");
  setInterval(tick, 1000);
}
