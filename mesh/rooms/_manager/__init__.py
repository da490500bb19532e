"""The RoomManager and the collaborators behind it, one job each (see ``_facade``)."""

from mesh.rooms._manager._facade import RoomManager

__all__ = ["RoomManager"]
