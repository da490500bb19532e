"""A pytest plugin for the A2A TCK (a2aproject/a2a-tck), which cannot send credentials: every
httpx client the TCK makes sends ``Authorization: Bearer $TCK_BEARER``, a mesh token.

    TCK_BEARER=$(cat .mesh/admin.token) PYTHONPATH=scripts \\
        python run_tck.py --sut-host http://127.0.0.1:8700/a2a/AGENT --transport jsonrpc \\
        -- -p a2a_tck_bearer

Run it from the TCK's own checkout and virtualenv (it is not on a registry); docs/a2a.md
says what the mesh scores and why the rest fails.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

_HEADER = f"Bearer {os.environ['TCK_BEARER']}"


def _with_bearer(cls: Any) -> None:
    original = cls.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.headers.setdefault("Authorization", _HEADER)

    cls.__init__ = init


_with_bearer(httpx.Client)
_with_bearer(httpx.AsyncClient)
