"""Atomic writes: a failure half-way leaves the old content or nothing, never a partial one."""

import pytest

from keras_bertology.atomic import atomic_directory, atomic_file


def test_failed_directory_write_leaves_nothing(tmp_path):
    target = tmp_path / "export"
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "saved_model.pb").write_text("partial")
            raise RuntimeError("crash during export")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_directory_write_keeps_previous_version(tmp_path):
    target = tmp_path / "export"
    with atomic_directory(target) as staging:
        (staging / "v").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "v").write_text("2")
            raise RuntimeError("crash")
    assert (target / "v").read_text() == "1"
    with atomic_directory(target) as staging:
        (staging / "v").write_text("3")
    assert (target / "v").read_text() == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_atomic_file_keeps_suffix_and_cleans_up(tmp_path):
    target = tmp_path / "step-1.weights.h5"
    with pytest.raises(RuntimeError):
        with atomic_file(target) as staging:
            assert staging.name.endswith(".weights.h5")
            staging.write_text("partial")
            raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []
    with atomic_file(target) as staging:
        staging.write_text("done")
    assert target.read_text() == "done"
