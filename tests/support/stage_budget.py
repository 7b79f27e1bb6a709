"""CI's test stages against their time budgets (tests/support/durations.json), so that the next feature pays for its tests.

`make test` runs each stage with BERTOLOGY_TEST_STAGE set to its name (main, jax, alone). This plugin then
- orders the test files longest first by their stored durations, so that the two xdist workers, each taking
  whole files, finish close together (the files handed out last are the short ones);
- in the controlling process, adds up each file's setup, call and teardown time and, at the end, fails a run
  whose wall time, brought to the speed of the machine the durations were recorded on, exceeds the stage's
  budget, naming the costliest files against their stored durations. The speed is the median ratio of the
  long files' times to their stored ones: CI's machines run the same files 1.0-1.8x slower from one run to
  the next, and a budget in raw seconds failed runs that added nothing. A new or grown test file counts at
  its full time (the median is the other files'); a slowdown of every file alike is the benchmarks' to
  find, not the budget's;
- with BERTOLOGY_RECORD_DURATIONS=1 (`make durations`), rewrites the stage's measured times in the file
  instead (per file, and per test for the tests of SLOW_TEST_S or more), leaving its budget as it is: a budget is raised by hand, in review.
A developer running a file or two sets neither variable: the files are still ordered, nothing is enforced.
"""

import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
STAGE_VARIABLE = "BERTOLOGY_TEST_STAGE"
RECORD_VARIABLE = "BERTOLOGY_RECORD_DURATIONS"
COSTLIEST_SHOWN = 5
SLOW_TEST_S = 5  # a test at least this long is recorded by name too: where the next cut in a file would come from
# The machine's speed is read from the files stored at SPEED_FILE_S or more (a shorter one is mostly start-up),
# when there are at least SPEED_FILES of them, and held within SLOWDOWN_RANGE (beyond it the run is not a
# slower machine but a broken one, and is held to the budget as if at 2x).
SPEED_FILE_S = 20
SPEED_FILES = 5
SLOWDOWN_RANGE = (0.5, 2.0)


def stage_name():
    """The stage `make test` runs now, or the one a developer's run resembles (for the order only)."""
    default = "jax" if os.environ.get("KERAS_BACKEND") == "jax" else "main"
    return os.environ.get(STAGE_VARIABLE) or default


def machine_slowdown(measured, stored):
    """How many times longer this machine ran the stage's long files than the one that recorded them (the
    median ratio), or 1 when too few were both stored and run to tell."""
    ratios = [measured[name] / stored[name] for name in measured if stored.get(name, 0) >= SPEED_FILE_S]
    if len(ratios) < SPEED_FILES:
        return 1.0
    low, high = SLOWDOWN_RANGE
    return min(max(statistics.median(ratios), low), high)


def over_budget_line(stage, budget, wall, slowdown, measured, stored):
    """The one line a run over its budget prints: the budget, the time, the costliest files."""
    costliest = sorted(measured, key=measured.get, reverse=True)[:COSTLIEST_SHOWN]
    files = ", ".join(f"{name} {measured[name]:.0f} s (stored {stored[name]:.0f} s)" if name in stored
                      else f"{name} {measured[name]:.0f} s (new)" for name in costliest)
    return (f"test stage '{stage}' took {wall:.0f} s, {wall / slowdown:.0f} s at the recording machine's speed "
            f"(this one ran the stored files {slowdown:.2f}x as long), over its budget of {budget:.0f} s "
            f"({DURATIONS.name}); costliest files: {files}")


class StageClock:
    """Orders the files; in the controlling process, times them and holds the stage to its budget."""

    def __init__(self, path, stage, enforcing, recording, started):
        self.path, self.stage, self.enforcing, self.recording, self.started = \
            path, stage, enforcing, recording, started
        self.record = json.loads(path.read_text()) if path.exists() else {"stages": {}}
        self.stored = self.record["stages"].get(stage, {}).get("files", {})
        self.measured = defaultdict(float)
        self.measured_tests = defaultdict(float)
        self.verdict = None

    def pytest_collection_modifyitems(self, items):
        # A file not measured yet goes first: it may be long, and a long file handed out last is the one
        # the other worker waits for. `sort` is stable: a file's own order stays.
        items.sort(key=lambda item: -self.stored.get(file_of(item.nodeid), float("inf")))

    def pytest_runtest_logreport(self, report):
        self.measured[file_of(report.nodeid)] += report.duration
        self.measured_tests[report.nodeid] += report.duration

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        # An xdist worker's reports all reach the controller; a developer's run is held to nothing.
        if hasattr(session.config, "workerinput") or not (self.enforcing or self.recording):
            return
        wall = time.monotonic() - self.started
        budget = self.record["stages"].get(self.stage, {}).get("budget_s")
        if self.recording:
            self.write(wall)
        slowdown = machine_slowdown(self.measured, self.stored)
        if budget is not None and wall / slowdown > budget:
            self.verdict = over_budget_line(self.stage, budget, wall, slowdown, self.measured, self.stored)
            if self.enforcing and not self.recording and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.verdict:
            terminalreporter.write_line(self.verdict, red=True, bold=True)

    def write(self, wall):
        stage = self.record["stages"].setdefault(self.stage, {})
        stage["wall_s"] = round(wall)
        stage["files"] = {name: round(seconds, 1) for name, seconds
                          in sorted(self.measured.items(), key=lambda entry: -entry[1])}
        stage["slow_tests"] = {name: round(seconds, 1) for name, seconds
                               in sorted(self.measured_tests.items(), key=lambda entry: -entry[1])
                               if seconds >= SLOW_TEST_S}
        self.path.write_text(json.dumps(self.record, indent=2) + "\n")


def file_of(nodeid):
    return nodeid.split("::", 1)[0]


def register(config, started, path=DURATIONS):
    """Plug the clock into this run; `started` is when the run began (time.monotonic())."""
    clock = StageClock(path, stage_name(), enforcing=STAGE_VARIABLE in os.environ,
                       recording=os.environ.get(RECORD_VARIABLE) == "1", started=started)
    config.pluginmanager.register(clock, "stage_budget")
