"""CI's test stages against their time budgets (tests/support/durations.json), so that the next feature pays for its tests.

`make test` runs each stage with BERTOLOGY_TEST_STAGE set to its name (main, jax, alone). This plugin then
- orders the test files longest first by their stored durations, so that the two xdist workers, each taking
  whole files, finish close together (the files handed out last are the short ones);
- in the controlling process, adds up each file's setup, call and teardown time and, at the end, fails a run
  whose wall time exceeds the stage's budget, naming the costliest files against their stored durations;
- with BERTOLOGY_RECORD_DURATIONS=1 (`make durations`), rewrites the stage's measured times in the file
  instead (per file, and per test for the tests of SLOW_TEST_S or more), leaving its budget as it is: a budget is raised by hand, in review.
A developer running a file or two sets neither variable: the files are still ordered, nothing is enforced.
"""

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
STAGE_VARIABLE = "BERTOLOGY_TEST_STAGE"
RECORD_VARIABLE = "BERTOLOGY_RECORD_DURATIONS"
COSTLIEST_SHOWN = 5
SLOW_TEST_S = 5  # a test at least this long is recorded by name too: where the next cut in a file would come from


def stage_name():
    """The stage `make test` runs now, or the one a developer's run resembles (for the order only)."""
    default = "jax" if os.environ.get("KERAS_BACKEND") == "jax" else "main"
    return os.environ.get(STAGE_VARIABLE) or default


def over_budget_line(stage, budget, wall, measured, stored):
    """The one line a run over its budget prints: the budget, the time, the costliest files."""
    costliest = sorted(measured, key=measured.get, reverse=True)[:COSTLIEST_SHOWN]
    files = ", ".join(f"{name} {measured[name]:.0f} s (stored {stored[name]:.0f} s)" if name in stored
                      else f"{name} {measured[name]:.0f} s (new)" for name in costliest)
    return (f"test stage '{stage}' took {wall:.0f} s, over its budget of {budget:.0f} s ({DURATIONS.name}); "
            f"costliest files: {files}")


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
        if budget is not None and wall > budget:
            self.verdict = over_budget_line(self.stage, budget, wall, self.measured, self.stored)
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
