"""Signed key-value entries: a reader takes an entry only with its claimed writer's signature."""

from __future__ import annotations

import base64

import msgspec
import pytest
from structlog.testing import capture_logs

from mesh.cluster import _sealed
from mesh.cluster._keys import DaemonKey, KeyRing
from mesh.cluster._sealed import SEAL_GROUP, Opened, Roots, seal, seal_many, unseal
from mesh.cluster._wire import entry_prefix

A, B = DaemonKey.generate(), DaemonKey.generate()
RING = KeyRing()
RING.add("a", A.public)
RING.add("b", B.public)
BODY = b'{"daemon":"b","id":"bob"}'


def test_an_entry_sealed_by_its_writer_opens() -> None:
    value = seal(B, "b", "mesh-mesh-agents", "agent.b.bob", BODY)
    assert value.startswith(entry_prefix("b"))  # a watch still skips its own echoes
    assert unseal(RING, "mesh-mesh-agents", "agent.b.bob", value) == Opened("b", BODY)


def test_an_entry_a_wrote_in_bs_name_or_moved_elsewhere_is_refused_and_logged() -> None:
    forged = seal(A, "b", "mesh-mesh-leases", "tea", b'{"daemon":"b"}')  # a's key, b's name
    moved = seal(B, "b", "mesh-mesh-leases", "tea", b'{"daemon":"b"}')
    stranger = seal(DaemonKey.generate(), "z", "mesh-mesh-leases", "tea", b"{}")
    with capture_logs() as logs:
        assert unseal(RING, "mesh-mesh-leases", "tea", forged) is None
        assert unseal(RING, "mesh-mesh-leases", "coffee", moved) is None  # another key
        assert unseal(RING, "mesh-mesh-leases", "tea", stranger) is None  # an unknown daemon
        assert unseal(RING, "mesh-mesh-leases", "tea", b'{"daemon":"b"}') is None  # unsigned
        assert unseal(RING, "mesh-mesh-leases", "tea", b"not json") is None
    assert [entry["event"] for entry in logs] == ["cluster.forged"] * 5
    assert [entry["claimed"] for entry in logs] == ["b", "b", "z", "b", ""]
    assert all("daemon" not in entry["subject"] for entry in logs)  # never the value


class _Counting(DaemonKey):
    """A daemon's key that counts what it signs."""

    __slots__ = ("signed",)

    def __init__(self, key: DaemonKey) -> None:
        super().__init__(key._private)
        self.signed = 0

    def sign(self, data: bytes) -> str:
        self.signed += 1
        return super().sign(data)


def test_entries_sealed_together_cost_a_signature_per_group_and_each_opens_alone() -> None:
    key = _Counting(B)
    entries = [
        (f"agent.b.a{i}", b'{"daemon":"b","id":"a%d"}' % i) for i in range(2 * SEAL_GROUP + 1)
    ]
    values = seal_many(key, "b", "mesh-mesh-agents", entries)
    assert key.signed == 3  # 64, 64 and the last one's group
    assert all(value.startswith(entry_prefix("b")) for value in values)
    roots = Roots()
    opened = [
        unseal(RING, "mesh-mesh-agents", k, v, roots)
        for (k, _), v in zip(entries, values, strict=True)
    ]
    assert opened == [Opened("b", body) for _, body in entries]
    # Each alone, with no root known: a reader that sees one key's last value only.
    assert unseal(RING, "mesh-mesh-agents", entries[5][0], values[5]) == Opened("b", entries[5][1])
    assert seal_many(key, "b", "mesh-mesh-agents", entries[:1]) == [
        seal(B, "b", "mesh-mesh-agents", *entries[0])  # one entry: sealed alone, as before
    ]


def test_a_reader_checks_a_batchs_signature_once() -> None:
    checked: list[str] = []

    class Ring(KeyRing):
        def verify(self, daemon: str, data: bytes, signature: str | None) -> bool:
            checked.append(daemon)
            return super().verify(daemon, data, signature)

    ring = Ring()
    ring.add("b", B.public)
    entries = [(f"agent.b.a{i}", b"{}") for i in range(SEAL_GROUP)]
    values = seal_many(B, "b", "mesh-mesh-agents", entries)
    roots = Roots()
    assert all(
        unseal(ring, "mesh-mesh-agents", k, v, roots)
        for (k, _), v in zip(entries, values, strict=True)
    )
    assert checked == ["b"]
    ring.add("b", A.public)  # b's key is another now: its roots are checked anew
    assert unseal(ring, "mesh-mesh-agents", entries[0][0], values[0], roots) is None


def test_an_entry_of_a_batch_moved_changed_or_given_another_path_is_refused() -> None:
    entries = [(f"agent.b.a{i}", b'{"daemon":"b","n":%d}' % i) for i in range(5)]
    values = seal_many(B, "b", "mesh-mesh-agents", entries)
    sealed = msgspec.json.decode(values[2])

    def edited(**fields: object) -> bytes:
        return msgspec.json.encode({**sealed, **fields})

    forged_by_a = seal_many(A, "b", "mesh-mesh-agents", entries)[2]  # a's key, b's name
    short = sealed["path"][: len(sealed["path"]) // 2]
    refused = [
        ("agent.b.a3", values[2]),  # another key of the batch
        ("agent.b.a2", edited(body={"daemon": "b", "n": 99})),  # another body
        ("agent.b.a2", edited(leaf=3)),  # another place in the tree
        ("agent.b.a2", edited(leaf=1 << 20)),  # a place no tree of its path has
        ("agent.b.a2", edited(path=short)),
        ("agent.b.a2", edited(path="not base64!")),
        ("agent.b.a2", edited(sig=msgspec.json.decode(values[0])["sig"][::-1])),
        ("agent.b.a2", forged_by_a),
    ]
    with capture_logs() as logs:
        for kv_key, value in refused:
            assert unseal(RING, "mesh-mesh-agents", kv_key, value, Roots()) is None, value
        assert unseal(RING, "mesh-mesh-leases", "agent.b.a2", values[2]) is None  # other bucket
    assert [entry["event"] for entry in logs] == ["cluster.forged"] * (len(refused) + 1)


def test_the_leaves_of_a_verified_batch_climb_only_to_a_node_already_proven(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each leaf of a batch still opens only through its batch's signed root, but a reader
    that opened others of it stops where their paths went: about two digests a leaf, where
    a full climb is seven (its leaf and six nodes)."""
    entries = [(f"agent.b.a{i}", b'{"daemon":"b","n":%d}' % i) for i in range(SEAL_GROUP)]
    values = seal_many(B, "b", "mesh-mesh-agents", entries)
    digests = 0
    node = _sealed._node

    def counted(left: bytes, right: bytes) -> bytes:
        nonlocal digests
        digests += 1
        return node(left, right)

    monkeypatch.setattr(_sealed, "_node", counted)
    roots = Roots()
    for (kv_key, body), value in zip(entries, values, strict=True):
        assert unseal(RING, "mesh-mesh-agents", kv_key, value, roots) == Opened("b", body)
    assert digests <= SEAL_GROUP  # nodes: 63 in the tree; 6 a leaf (384) without the tree


def test_an_altered_entry_of_a_batch_already_read_is_refused_all_the_same() -> None:
    entries = [(f"agent.b.a{i}", b'{"daemon":"b","n":%d}' % i) for i in range(SEAL_GROUP)]
    values = seal_many(B, "b", "mesh-mesh-agents", entries)
    roots = Roots()
    for (kv_key, _), value in zip(entries, values, strict=True):
        assert unseal(RING, "mesh-mesh-agents", kv_key, value, roots) is not None
    sealed = msgspec.json.decode(values[2])

    def edited(**fields: object) -> bytes:
        return msgspec.json.encode({**sealed, **fields})

    refused = [
        ("agent.b.a3", values[2]),  # another key of the batch
        ("agent.b.a2", edited(body={"daemon": "b", "n": 99})),  # another body
        ("agent.b.a2", edited(leaf=3)),  # another place in the tree
        ("agent.b.a2", edited(leaf=-2)),
        ("agent.b.a2", edited(leaf=1 << 20)),
        ("agent.b.a2", edited(path=sealed["path"][: len(sealed["path"]) // 2])),
        ("agent.b.a2", edited(path="not base64!")),
        ("agent.b.a2", seal_many(A, "b", "mesh-mesh-agents", entries)[2]),  # a's key, b's name
    ]
    with capture_logs() as logs:
        for kv_key, value in refused:
            assert unseal(RING, "mesh-mesh-agents", kv_key, value, roots) is None, value
    assert [entry["event"] for entry in logs] == ["cluster.forged"] * len(refused)
    # The genuine ones still open from the same trees.
    assert unseal(RING, "mesh-mesh-agents", *entries[2][:1], values[2], roots) is not None


def test_a_batchs_tree_holds_only_what_a_climb_proved() -> None:
    """An entry's siblings above the node its climb met were never hashed: whatever they
    say, the reader keeps none of them."""
    entries = [(f"agent.b.a{i}", b'{"daemon":"b","n":%d}' % i) for i in range(8)]
    values = seal_many(B, "b", "mesh-mesh-agents", entries)
    levels = [[_sealed._leaf("mesh-mesh-agents", k, body) for k, body in entries]]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([_sealed._node(below[i], below[i + 1]) for i in range(0, len(below), 2)])
    roots = Roots()
    assert unseal(RING, "mesh-mesh-agents", entries[0][0], values[0], roots) is not None
    # Entry 4's climb meets what entry 0's proved at level 2; its level-2 sibling is made up.
    sealed = msgspec.json.decode(values[4])
    siblings = bytearray(base64.urlsafe_b64decode(sealed["path"]))
    siblings[64:96] = bytes(32)
    sealed["path"] = base64.urlsafe_b64encode(bytes(siblings)).decode()
    # The entry itself is b's (its leaf and the siblings it hashed with are): it opens.
    assert unseal(RING, "mesh-mesh-agents", entries[4][0], msgspec.json.encode(sealed), roots)
    [tree] = roots._trees.values()
    assert all(levels[level][place] == node for (level, place), node in tree.nodes.items())
