"""A command runs with the garbage collector's young passes rarer (keras_bertology/collector.py), and the
process's own setting comes back after it, whether the command ended or failed."""

import gc

import pytest

from keras_bertology import cli
from keras_bertology.collector import THRESHOLDS, fewer_collections


@pytest.fixture
def default_collector():
    """Python's default thresholds during the test (the suite's conftest raises them), then the suite's."""
    suite = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*suite)


@pytest.mark.parametrize("fails", [False, True])
def test_a_command_runs_at_the_modules_thresholds_and_the_default_returns(default_collector, monkeypatch,
                                                                          tmp_path, fails):
    seen = []

    def command(args):
        seen.append(gc.get_threshold())
        if fails:
            raise OSError(28, "No space left on device", str(tmp_path / "out"))

    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS, export=command))
    assert cli.main(["export", str(tmp_path)]) == (cli.EXIT_USAGE if fails else 0)
    assert seen == [THRESHOLDS]
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("own", [(0, 10, 10), (50_000, 20, 20)])
def test_a_collector_turned_off_or_already_rarer_is_left_alone(own):
    before = gc.get_threshold()
    gc.set_threshold(*own)
    try:
        with fewer_collections():
            assert gc.get_threshold() == own
        assert gc.get_threshold() == own
    finally:
        gc.set_threshold(*before)


def test_the_thresholds_come_back_when_the_block_raises(default_collector):
    with pytest.raises(KeyError), fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
        raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10)
