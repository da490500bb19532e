"""Where the suite's CPU goes, file by file: the test process's own and its children's.

On a machine whose cores are shared, wall time says how busy the machine was; CPU says
what a test costs. Each test's CPU is read around its whole protocol (setup, call,
teardown) from ``getrusage``: the process's own, and that of the children it started
and reaped (a daemon, an agent, a ``mesh`` command, with coverage's start and tracer
in them under ``make test``). A child's CPU counts when it is reaped, so a module's
shared daemon is charged to the file's last test, which is why the report sums by file.

At the end of the run the files that cost most are printed, and every file's figures
are written to ``.pytest-cpu.json`` (or ``$MESH_TEST_CPU_REPORT``) for comparing runs.
Under pytest-xdist each worker sums its own files and hands them to the controller when it
stops; the whole run's figure is the controller's, whose reaped children are the workers
and, through them, everything they started.
"""

from __future__ import annotations

import json
import os
import resource
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

#: How many of the costliest files the terminal summary lists.
SHOWN = 15


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


#: The key under which a pytest-xdist worker hands its files' figures to the controller.
WORKER_OUTPUT = "mesh_cpu_by_file"


class CpuByFile:
    """Sums each test's CPU, its process's and its reaped children's, by file."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.files: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self.start = _cpu()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        own, children = _cpu()
        yield
        own_after, children_after = _cpu()
        row = self.files[item.nodeid.split("::", 1)[0]]
        row[0] += own_after - own
        row[1] += children_after - children
        row[2] += 1

    def pytest_sessionfinish(self) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:
            output[WORKER_OUTPUT] = dict(self.files)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        # pytest-xdist's controller: a worker stopped and sent what it measured.
        for path, (mine, theirs, tests) in node.workeroutput.get(WORKER_OUTPUT, {}).items():
            row = self.files[path]
            row[0] += mine
            row[1] += theirs
            row[2] += tests

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.files or hasattr(self.config, "workerinput"):
            return
        own, children = (now - then for now, then in zip(_cpu(), self.start, strict=True))
        ranked = sorted(self.files.items(), key=lambda kv: kv[1][0] + kv[1][1], reverse=True)
        write = terminalreporter.write_line
        terminalreporter.section("CPU by test file (s: this process + the children it reaped)")
        write(f"whole run: {own:.1f} + {children:.1f} = {own + children:.1f} s")
        write(f"{'total':>8} {'own':>8} {'children':>8} {'tests':>5}  file")
        for path, (mine, theirs, tests) in ranked[:SHOWN]:
            write(f"{mine + theirs:8.1f} {mine:8.1f} {theirs:8.1f} {int(tests):5d}  {path}")
        target = Path(os.environ.get("MESH_TEST_CPU_REPORT", ".pytest-cpu.json"))
        rows = {p: {"own": m, "children": c, "tests": int(n)} for p, (m, c, n) in ranked}
        target.write_text(json.dumps({"own": own, "children": children, "files": rows}, indent=1))
        write(f"every file's figures: {target}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(CpuByFile(config), "mesh-cpu-by-file")
