"""A2A's JSON on the wire: versions, method names, and the 0.3 shapes of 1.0's objects.

The mesh holds every A2A object in its 1.0 form (ProtoJSON of ``lf.a2a.v1``:
camelCase fields, ``TASK_STATE_*`` and ``ROLE_*`` enums, parts as ``{"text"}``,
``{"data"}``, ``{"url"}`` or ``{"raw"}``). A 0.3 client (an empty or ``0.3``
``A2A-Version`` header) speaks the older names (``message/send``, ...) and
shapes (``kind`` tags, lower-case states, ``final`` on the last status update);
this module translates at the edge, both ways, so nothing else knows 0.3 exists.
"""

from __future__ import annotations

import base64
from typing import Any, Final, Literal

__all__ = [
    "METHODS",
    "STATES_0_3",
    "TERMINAL",
    "Version",
    "WireError",
    "camel_keys",
    "event_for",
    "message_in",
    "negotiate",
    "task_for",
]

Version = Literal["1.0", "0.3"]

#: The 1.0 methods, and the 0.3 names of those 0.3 had.
METHODS: Final = frozenset(
    {
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    }
)
METHODS_0_3: Final = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}

TERMINAL: Final = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
#: A task in one of these waits for its client, so a stream ends there too.
INTERRUPTED: Final = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})
STATES_0_3: Final = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
_STATES_1_0: Final = {v: k for k, v in STATES_0_3.items()}
_ROLES_0_3: Final = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_ROLES_1_0: Final = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}


class WireError(ValueError):
    """An A2A object that is not what it must be (the text says where)."""


def negotiate(header: str | None) -> Version | None:
    """The version an ``A2A-Version`` header asks for; None if the mesh does not speak it."""
    value = (header or "").strip()
    if value in ("", "0.3") or value.startswith("0.3."):
        return "0.3"
    if value in ("1", "1.0") or value.startswith("1.0."):
        return "1.0"
    return None


def method_of(name: str, version: Version) -> str | None:
    """The 1.0 name of a method as a client of ``version`` calls it (None: unknown)."""
    if name in METHODS:
        return name  # a 0.3 client that knows the new names is understood too
    return METHODS_0_3.get(name) if version == "0.3" else None


def state_in(value: Any) -> str | None:
    """A task state as either version writes it, in its 1.0 form (None: not a state)."""
    if isinstance(value, str):
        if value in STATES_0_3:
            return value
        return _STATES_1_0.get(value)
    return None


# -- into the mesh (either version, leniently) -------------------------------------------

#: Fields whose values are the client's own JSON (``Struct``s), never A2A's: kept as sent.
_OPAQUE: Final = frozenset({"data", "metadata"})


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def camel_keys(value: Any) -> Any:
    """``value`` with A2A's field names in their JSON (lowerCamel) form.

    ProtoJSON parsers take a field by its proto name as well (``task_id`` for
    ``taskId``), and clients built on them send either; the mesh reads one. Where
    both are given the camelCase one wins, as it is the canonical form. The values
    of ``data`` and ``metadata`` are the client's own and are left alone.
    """
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = _camel(key) if isinstance(key, str) and "_" in key.strip("_") else key
        if name != key and name in value:
            continue  # the canonical spelling is there too
        out[name] = item if name in _OPAQUE else camel_keys(item)
    return out


def part_in(part: Any) -> dict[str, Any]:
    """A part as either version writes it, in its 1.0 form."""
    if not isinstance(part, dict):
        raise WireError("a part must be an object")
    kind = part.get("kind")
    out: dict[str, Any] = {}
    if isinstance(part.get("metadata"), dict):
        out["metadata"] = dict(part["metadata"])
    if kind == "file" and isinstance(part.get("file"), dict):
        file = part["file"]
        if "bytes" in file:
            out["raw"] = file["bytes"]
        else:
            out["url"] = str(file.get("uri", ""))
        if file.get("mimeType"):
            out["mediaType"] = file["mimeType"]
        if file.get("name"):
            out["filename"] = file["name"]
        return out
    if kind == "data":
        data = part.get("data")
        meta = out.get("metadata", {})
        if meta.pop("data_part_compat", False) and isinstance(data, dict):
            data = data.get("value")  # a 0.3 peer's wrapping of a non-object value
        if not meta:
            out.pop("metadata", None)
        out["data"] = data
        return out
    for key in ("text", "data", "url", "raw"):
        if key in part:
            out[key] = part[key]
            for extra in ("mediaType", "filename"):
                if extra in part:
                    out[extra] = part[extra]
            return out
    raise WireError("a part holds one of text, data, url or raw")


def message_in(message: Any) -> dict[str, Any]:
    """A message as either version writes it, in its 1.0 form (ValueError says what is wrong)."""
    if not isinstance(message, dict):
        raise WireError("`message` must be an object")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise WireError("`message.parts` must be a non-empty list")
    role = message.get("role", "ROLE_USER")
    out: dict[str, Any] = {
        "messageId": str(message.get("messageId") or ""),
        "role": _ROLES_1_0.get(role, role) if isinstance(role, str) else "ROLE_USER",
        "parts": [part_in(p) for p in parts],
    }
    for key in ("contextId", "taskId"):
        if isinstance(message.get(key), str) and message[key]:
            out[key] = message[key]
    if isinstance(message.get("metadata"), dict):
        out["metadata"] = message["metadata"]
    return out


# -- out of the mesh (in the client's version) ---------------------------------------------


def _part_0_3(part: dict[str, Any]) -> dict[str, Any]:
    meta = dict(part.get("metadata") or {})
    if "text" in part:
        out: dict[str, Any] = {"kind": "text", "text": part["text"]}
    elif "data" in part:
        data = part["data"]
        if not isinstance(data, dict):  # 0.3 data parts hold objects only
            data, meta["data_part_compat"] = {"value": data}, True
        out = {"kind": "data", "data": data}
    else:
        file: dict[str, Any] = {}
        if "raw" in part:
            raw = part["raw"]
            file["bytes"] = raw if isinstance(raw, str) else base64.b64encode(raw).decode()
        else:
            file["uri"] = part.get("url", "")
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    if meta:
        out["metadata"] = meta
    return out


def message_for(message: dict[str, Any], version: Version) -> dict[str, Any]:
    if version == "1.0":
        return message
    out = {**message, "kind": "message", "role": _ROLES_0_3.get(message.get("role", ""), "agent")}
    out["parts"] = [_part_0_3(p) for p in message.get("parts", ())]
    return out


def _status_for(status: dict[str, Any], version: Version) -> dict[str, Any]:
    if version == "1.0":
        return status
    out = {**status, "state": STATES_0_3.get(status.get("state", ""), "unknown")}
    if "message" in status:
        out["message"] = message_for(status["message"], version)
    return out


def _artifact_for(artifact: dict[str, Any], version: Version) -> dict[str, Any]:
    if version == "1.0":
        return artifact
    return {**artifact, "parts": [_part_0_3(p) for p in artifact.get("parts", ())]}


def task_for(task: dict[str, Any], version: Version) -> dict[str, Any]:
    """A task (1.0 form) as a client of ``version`` reads it."""
    if version == "1.0":
        return task
    out = {**task, "kind": "task", "status": _status_for(task["status"], version)}
    if "history" in task:
        out["history"] = [message_for(m, version) for m in task["history"]]
    if "artifacts" in task:
        out["artifacts"] = [_artifact_for(a, version) for a in task["artifacts"]]
    return out


def event_for(event: dict[str, Any], version: Version) -> dict[str, Any]:
    """One ``StreamResponse`` (1.0: ``{"task"|"message"|"statusUpdate"|"artifactUpdate": ...}``)
    as a client of ``version`` reads it (0.3: the object itself, tagged by ``kind``)."""
    if version == "1.0":
        return event
    if "task" in event:
        return task_for(event["task"], version)
    if "message" in event:
        return message_for(event["message"], version)
    if "statusUpdate" in event:
        update = event["statusUpdate"]
        state = update["status"].get("state", "")
        return {
            **update,
            "kind": "status-update",
            "status": _status_for(update["status"], version),
            "final": state in TERMINAL or state in INTERRUPTED,
        }
    update = event["artifactUpdate"]
    return {
        **update,
        "kind": "artifact-update",
        "artifact": _artifact_for(update["artifact"], version),
    }
