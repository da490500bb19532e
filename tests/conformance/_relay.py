"""Copies stdin to one FIFO and another FIFO to stdout: half of a stdio test pair.

Two of these, joined through two FIFOs, connect two ``open_stdio_process``
streams to each other: what one stream sends, the other receives. It exits when
either direction ends, as an agent whose stdin closes does. Standard library
only: it runs with ``python -I -S``.

usage: python _relay.py IN_FIFO OUT_FIFO
"""

import os
import sys
import threading

CHUNK = 64 * 1024


def pump(source: str | int, sink: str | int) -> None:
    try:
        src = os.open(source, os.O_RDONLY) if isinstance(source, str) else source
        dst = os.open(sink, os.O_WRONLY) if isinstance(sink, str) else sink
        while chunk := os.read(src, CHUNK):
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]
    except OSError:
        pass  # the other side went away: this relay's job is over
    finally:
        os._exit(0)


def main() -> None:
    fifo_in, fifo_out = sys.argv[1:3]
    # One thread per direction: opening a FIFO blocks until its other end opens.
    threading.Thread(target=pump, args=(0, fifo_out), daemon=True).start()
    pump(fifo_in, 1)


if __name__ == "__main__":
    main()
