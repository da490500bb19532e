"""Settings that would let one token's share make a shared pool unreachable are refused at start."""

from __future__ import annotations

import pytest

from mesh.daemon import SettingsError, load_settings


def test_the_defaults_keep_room_slots_for_newcomers_and_admins() -> None:
    settings = load_settings(environ={})
    assert settings.newcomer_rooms >= 1 and settings.admin_rooms >= 1
    assert settings.max_rooms_per_identity < settings.max_active_rooms - settings.newcomer_rooms


def test_one_tokens_share_may_not_be_every_room_slot_with_no_newcomers_reserve() -> None:
    bounds = {"newcomer_rooms": 0, "max_rooms_per_identity": 4, "max_active_rooms": 4}
    with pytest.raises(SettingsError) as refused:
        load_settings(environ={}, overrides=bounds)
    for name in bounds:
        assert name in str(refused.value)
    # With the reserve, or a smaller share, the same pool is fine.
    assert load_settings(environ={}, overrides={**bounds, "newcomer_rooms": 1})
    assert load_settings(environ={}, overrides={**bounds, "max_rooms_per_identity": 3})
