"""On trio a connection reads its run's clock directly (no lookup of the run per reading).

The clock is bound when a connection (or a memory stream) first asks for the loop's
primitives, so each run must get its own: a later run with another clock (a test's
``MockClock``) must not read the first run's.
"""

from __future__ import annotations

import trio
import trio.testing

from mesh import open_peer, serve_peer
from mesh.agents.echo import agent
from transports import memory_stream_pair
from transports._loop import current_loop


def test_each_trio_run_reads_its_own_clock() -> None:
    for jump in (100.0, 250.0):
        clock = trio.testing.MockClock()

        async def main(jump: float = jump, clock: trio.testing.MockClock = clock) -> None:
            loop = current_loop()
            clock.jump(jump)
            assert loop.now() == trio.current_time() == clock.current_time()

        trio.run(main, clock=clock)


def test_a_call_times_out_on_the_runs_clock() -> None:
    """A deadline is measured on the run's clock: under an autojumping ``MockClock`` a
    call to a tool that sleeps a minute times out at once, in two runs in a row."""
    for _ in range(2):
        clock = trio.testing.MockClock(autojump_threshold=0)
        outcome: list[BaseException] = []

        async def main(outcome: list[BaseException] = outcome) -> None:
            client, server = memory_stream_pair()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_peer, server, agent)
                async with open_peer(client, agent=agent.id) as peer:
                    started = trio.current_time()
                    try:
                        await peer.call_tool("echo", {"message": "x", "delay": 60}, timeout=5)
                    except Exception as failed:
                        outcome.append(failed)
                    assert 5 <= trio.current_time() - started < 60
                await server.aclose()

        trio.run(main, clock=clock)
        assert [type(exc).__name__ for exc in outcome] == ["CallTimeout"]
