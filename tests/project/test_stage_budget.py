"""`make test` fails a stage over its time budget, orders files longest first, and `make durations` records them
(tests/support/stage_budget.py), on a tiny suite run in process."""

import json

import pytest

pytest_plugins = ["pytester"]

SLOW_FILE = "import time\n\ndef test_takes_its_time():\n    time.sleep(0.3)\n"


@pytest.fixture
def tiny_suite(pytester, monkeypatch):
    """Write a suite whose conftest plugs in the clock with its own durations file; return a function that
    stores `stages` in that file."""
    monkeypatch.delenv("BERTOLOGY_TEST_STAGE", raising=False)
    monkeypatch.delenv("BERTOLOGY_RECORD_DURATIONS", raising=False)
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    pytester.makeconftest("""
        import time
        from pathlib import Path

        import stage_budget

        def pytest_configure(config):
            stage_budget.register(config, time.monotonic(), Path(__file__).with_name("durations.json"))
    """)
    pytester.makepyfile(test_slow=SLOW_FILE, test_quick="def test_quick():\n    pass\n")

    def store(stages):
        (pytester.path / "durations.json").write_text(json.dumps({"stages": stages}))
    return store


def test_a_stage_over_its_budget_fails_and_names_its_costliest_files(tiny_suite, pytester, monkeypatch):
    tiny_suite({"main": {"budget_s": 0.1, "files": {"test_slow.py": 0.2}}})
    monkeypatch.setenv("BERTOLOGY_TEST_STAGE", "main")
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["test stage 'main' took * s, * s at the recording machine's speed (this one ran "
                                 "the stored files 1.00x as long), over its budget of 0 s (durations.json); "
                                 "costliest files: test_slow.py 0 s (stored 0 s), test_quick.py 0 s (new)"])


def test_a_stage_within_its_budget_passes(tiny_suite, pytester, monkeypatch):
    tiny_suite({"main": {"budget_s": 600, "files": {}}})
    monkeypatch.setenv("BERTOLOGY_TEST_STAGE", "main")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*over its budget*")


def test_a_slower_machine_is_held_to_the_budget_at_the_recording_machines_speed(tiny_suite, pytester,
                                                                              monkeypatch):
    """test_slow.py runs in 0.3 s, 30 times its stored 0.01 s: the machine counts as 10x slower, so a wall of
    0.3 s and more is 0.03 s and more at the recording speed: within 0.2 s (in raw seconds it is over), over 0.01 s."""
    import stage_budget

    monkeypatch.setattr(stage_budget, "SPEED_FILE_S", 0.01)
    monkeypatch.setattr(stage_budget, "SPEED_FILES", 1)
    monkeypatch.setattr(stage_budget, "SLOWDOWN_RANGE", (0.5, 10.0))
    monkeypatch.setenv("BERTOLOGY_TEST_STAGE", "main")
    for budget, outcome in ((0.01, pytest.ExitCode.TESTS_FAILED), (0.2, pytest.ExitCode.OK)):
        tiny_suite({"main": {"budget_s": budget, "files": {"test_slow.py": 0.01}}})
        result = pytester.runpytest_inprocess()
        assert result.ret == outcome, result.stdout.str()
    result.stdout.no_fnmatch_line("*over its budget*")


def test_the_machines_slowdown_is_the_median_of_its_long_files_and_new_files_count_in_full():
    from stage_budget import machine_slowdown

    stored = {f"test_{n}.py": 100.0 for n in range(5)} | {"test_short.py": 1.0}
    measured = {"test_0.py": 130.0, "test_1.py": 150.0, "test_2.py": 140.0, "test_3.py": 400.0, "test_4.py": 90.0,
                "test_short.py": 30.0, "test_new.py": 900.0}
    assert machine_slowdown(measured, stored) == pytest.approx(1.4)  # not the short file's 30x, not the new one
    assert machine_slowdown({"test_0.py": 130.0}, stored) == 1.0  # one file tells nothing
    assert machine_slowdown({name: 1000.0 for name in stored}, stored) == 2.0  # held in its range


def test_a_developers_run_outside_make_test_is_not_held_to_the_budget(tiny_suite, pytester):
    tiny_suite({"main": {"budget_s": 0.1, "files": {}}})
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.OK


def test_files_run_longest_first_by_their_stored_durations_and_new_files_first_of_all(tiny_suite, pytester):
    pytester.makepyfile(test_new="def test_new():\n    pass\n")
    tiny_suite({"main": {"budget_s": 600, "files": {"test_quick.py": 5.0, "test_slow.py": 1.0}}})
    result = pytester.runpytest_inprocess("--collect-only", "-q")
    ran = [line for line in result.stdout.lines if "::" in line]
    assert ran == ["test_new.py::test_new", "test_quick.py::test_quick", "test_slow.py::test_takes_its_time"]


def test_recording_rewrites_the_stages_times_and_keeps_its_budget(tiny_suite, pytester, monkeypatch):
    import stage_budget

    monkeypatch.setattr(stage_budget, "SLOW_TEST_S", 0.2)  # test_slow's test sleeps 0.3 s
    tiny_suite({"jax": {"budget_s": 0.1, "files": {"gone.py": 9.0}}, "main": {"budget_s": 7, "files": {}}})
    monkeypatch.setenv("BERTOLOGY_TEST_STAGE", "jax")
    monkeypatch.setenv("BERTOLOGY_RECORD_DURATIONS", "1")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.OK  # recording reports the overrun but lets the next stage run
    result.stdout.fnmatch_lines(["test stage 'jax' took * s, * over its budget of 0 s*"])
    stages = json.loads((pytester.path / "durations.json").read_text())["stages"]
    assert stages["main"] == {"budget_s": 7, "files": {}}
    assert stages["jax"]["budget_s"] == 0.1
    assert list(stages["jax"]["files"]) == ["test_slow.py", "test_quick.py"]
    assert stages["jax"]["files"]["test_slow.py"] >= 0.3
    assert list(stages["jax"]["slow_tests"]) == ["test_slow.py::test_takes_its_time"]  # not the quick one
    assert stages["jax"]["wall_s"] >= 0
