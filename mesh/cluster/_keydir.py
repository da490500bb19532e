"""The mesh's key directory: each daemon's public key in the keys bucket, mirrored by all.

A daemon writes its own entry when it joins (a create: a daemon id belongs to
one key, and a daemon whose id is registered with another key refuses to join)
and watches the bucket into its :class:`~mesh.cluster._keys.KeyRing`. The NATS
permissions let each daemon's user write only its own key, so no one can
replace another daemon's. A message from a daemon whose key has not reached the
watch yet (it joined a moment ago) is checked after one direct read of its key.
"""

from __future__ import annotations

from typing import Final

from mesh._logging import get_logger
from mesh.cluster._errors import ClusterError
from mesh.cluster._keys import Keys
from mesh.cluster._kv import KvChange
from mesh.cluster._link import NatsLink, Watch
from mesh.cluster._settings import Names

__all__ = ["KeyDirectory"]

log = get_logger("mesh.cluster")

#: Unknown daemons whose key we read directly are remembered, up to this many, so a
#: stream of messages claiming made-up daemons costs one read each, not one per message.
_MISSES_KEPT: Final = 10_000


class KeyDirectory:
    """Publishes this daemon's key and keeps the ring of everyone's; see the module docstring."""

    def __init__(self, link: NatsLink, names: Names, keys: Keys) -> None:
        self._link = link
        self._names = names
        self.keys = keys
        self._watch: Watch | None = None
        self._missed: set[str] = set()

    async def publish(self) -> None:
        """Write our key (once: it is checked, never replaced); refuse to join if our id
        is registered with another key."""
        bucket, daemon = self._names.keys_bucket, self._names.daemon
        await self._link.ensure_bucket(bucket)
        mine = self.keys.key.public.encode()
        subject = f"$KV.{bucket}.{daemon}"
        for _ in range(3):  # a delete between our read and our create: read again
            last = await self._link.last_message(f"KV_{bucket}", subject)
            if last is not None and last.data:
                if last.data == mine:
                    return
                raise ClusterError(
                    f"daemon id {daemon!r} is registered in mesh {self._names.cluster!r} with "
                    f"another key ({last.data.decode(errors='replace')[:44]}); a daemon id "
                    "belongs to one key: start it with its own cluster.key, or have the "
                    f"operator remove the entry (nats kv del {bucket} {daemon})"
                )
            expected = 0 if last is None else last.sequence
            if await self._link.js_publish(subject, mine, expected_last=expected) is not None:
                return
        raise ClusterError(f"could not register daemon {daemon!r}'s key in {bucket}")

    async def start_watch(self) -> None:
        """(Re)start mirroring the bucket into the ring (on every connect)."""
        if self._watch is not None:
            await self._watch.stop()
        self._watch = await self._link.watch(self._names.keys_bucket, self._on_change)

    def _on_change(self, change: KvChange | None) -> None:
        if change is None or change.key == self._names.daemon:
            return  # our own key is in the ring from the start, and only we may write it
        if change.value is None:
            self.keys.ring.remove(change.key)
        elif not self.keys.ring.add(change.key, change.value.decode(errors="replace")):
            log.warning("cluster.bad_key", daemon=change.key)

    async def ensure(self, daemon: str) -> bool:
        """Whether ``daemon``'s key is known, reading it directly if the watch has not
        brought it yet (once per unknown daemon)."""
        if daemon in self.keys.ring:
            return True
        if daemon in self._missed or not daemon:
            return False
        try:
            found = await self._link.kv_get(self._names.keys_bucket, daemon)
        except ClusterError:
            return False
        if found is None or not self.keys.ring.add(daemon, found[0].decode(errors="replace")):
            if len(self._missed) >= _MISSES_KEPT:
                self._missed.clear()
            self._missed.add(daemon)
            log.warning("cluster.unknown_daemon", daemon=daemon)
            return False
        return True
