"""Keep task-group exception groups from leaking out of our context managers.

Our ``open_*`` context managers run background tasks in a task group, so an
error from the caller's own ``async with`` body (or from one of our tasks) comes
out wrapped in an ExceptionGroup. A user who wrote ``except ConnectionLost``
should catch it: when a group holds exactly one error, raise that error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["unwrap_single_error"]


@contextmanager
def unwrap_single_error() -> Iterator[None]:
    """Around a task group: re-raise a group's only error (however deeply nested) as itself.

    Public because every ``open_*`` that owns a task group needs it: ours, the
    mesh's, and a third-party transport's, so that they all raise alike. A group
    of two or more errors is re-raised untouched; the leaf keeps its own
    ``__cause__`` and drops the group as its context.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is group:
            raise
        leaf.__suppress_context__ = True  # the group adds nothing a reader needs
        raise leaf from leaf.__cause__
