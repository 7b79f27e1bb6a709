"""Atomic writes: a failure or crash at any point leaves the old content or the new, never a mix
or nothing, and finished outputs are readable by other users (umask modes)."""

import errno
import os
import shutil
import stat
from pathlib import Path

import pytest

from keras_bertology import atomic
from keras_bertology.atomic import (
    atomic_directory,
    atomic_file,
    clear_leftovers,
    recover_directory,
    remove_directory,
)


def _write_version(target, version):
    with atomic_directory(target) as staging:
        (staging / "v").write_text(version)
        (staging / "weights").write_text(version * 100)


def _version(target):
    """The version a reader sees; a folder mixing two versions fails the check."""
    assert (target / "weights").read_text() == (target / "v").read_text() * 100
    return (target / "v").read_text()


def _entries(folder):
    return sorted(path.name for path in folder.iterdir())


def test_failed_directory_write_leaves_nothing(tmp_path):
    target = tmp_path / "export"
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "saved_model.pb").write_text("partial")
            raise RuntimeError("crash during export")
    assert _entries(tmp_path) == []


def test_failed_directory_write_keeps_previous_version(tmp_path):
    target = tmp_path / "export"
    _write_version(target, "1")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "v").write_text("2")
            raise RuntimeError("crash")
    assert _version(target) == "1"
    _write_version(target, "3")
    assert _version(target) == "3"
    assert _entries(tmp_path) == ["export"]


def test_replacing_swaps_in_one_step(tmp_path, monkeypatch):
    """With the exchange, no moment exists where the destination is missing: it is never renamed away."""
    target = tmp_path / "export"
    _write_version(target, "1")
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (renamed.append((a, b)), real_replace(a, b)))
    _write_version(target, "2")
    assert _version(target) == "2" and renamed == []
    assert _entries(tmp_path) == ["export"]


def test_crash_after_the_exchange_leaves_the_new_version(tmp_path, monkeypatch):
    target = tmp_path / "export"
    _write_version(target, "1")
    monkeypatch.setattr(atomic.shutil, "rmtree", _crash_deleting(lambda name: name.endswith(".tmp")))
    with pytest.raises(KeyboardInterrupt):
        _write_version(target, "2")  # the exchange put version 1 in the staging folder
    monkeypatch.undo()
    assert _version(target) == "2"
    _write_version(target, "3")
    assert _version(target) == "3"
    # A writer cannot know that another one's staging folder is dead; a single-writer folder can.
    (leftover,) = [name for name in _entries(tmp_path) if name != "export"]
    assert leftover.startswith(".export.") and leftover.endswith(".tmp")
    clear_leftovers(tmp_path)
    assert _entries(tmp_path) == ["export"]


@pytest.mark.parametrize("crash", [KeyboardInterrupt("power cut"), OSError(errno.EIO, "disk error")])
def test_a_failed_exchange_keeps_the_old_version(tmp_path, monkeypatch, crash):
    target = tmp_path / "export"
    _write_version(target, "1")

    def failing_exchange(first, second):
        raise crash

    monkeypatch.setattr(atomic, "exchange", failing_exchange)
    with pytest.raises(type(crash)):
        _write_version(target, "2")
    assert _version(target) == "1"
    assert _entries(tmp_path) == ["export"]


def _crash_deleting(matches):
    """An rmtree that dies (like a power cut) when it starts on an existing folder whose name `matches`."""
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if matches(Path(path).name) and Path(path).exists():
            raise KeyboardInterrupt("power cut")
        real_rmtree(path, *args, **kwargs)

    return rmtree


def _no_exchange(first, second):
    raise OSError(errno.EINVAL, "exchange not supported here")


def test_fallback_swap_without_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "exchange", _no_exchange)
    target = tmp_path / "export"
    _write_version(target, "1")
    _write_version(target, "2")
    assert _version(target) == "2"
    assert _entries(tmp_path) == ["export"]


def test_crash_between_the_fallback_renames_is_recovered(tmp_path, monkeypatch):
    """The fallback renames the old folder away first; a crash right then leaves only `.export.old`."""
    monkeypatch.setattr(atomic, "exchange", _no_exchange)
    target = tmp_path / "export"
    _write_version(target, "1")
    real_replace = os.replace

    def crash_on_second_rename(source, destination):
        if str(destination) == str(target):
            raise KeyboardInterrupt("power cut")
        real_replace(source, destination)

    monkeypatch.setattr(atomic.os, "replace", crash_on_second_rename)
    with pytest.raises(KeyboardInterrupt):
        _write_version(target, "2")
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert not target.exists() and (tmp_path / ".export.old").is_dir()
    recover_directory(target)  # what readers call first
    assert _version(target) == "1"
    assert _entries(tmp_path) == ["export"]


def test_crash_after_the_fallback_renames_keeps_the_new_version(tmp_path, monkeypatch):
    """The fallback deletes `.export.old` last; a crash before that leaves the new version and a backup."""
    monkeypatch.setattr(atomic, "exchange", _no_exchange)
    target = tmp_path / "export"
    _write_version(target, "1")
    monkeypatch.setattr(atomic.shutil, "rmtree", _crash_deleting(lambda name: name == ".export.old"))
    with pytest.raises(KeyboardInterrupt):
        _write_version(target, "2")
    monkeypatch.undo()  # the next write may well exchange
    assert _version(target) == "2" and (tmp_path / ".export.old").is_dir()
    recover_directory(target)  # readers leave a finished swap alone
    assert _version(target) == "2"
    _write_version(target, "3")
    assert _version(target) == "3"
    assert _entries(tmp_path) == ["export"]


def test_next_write_recovers_an_interrupted_fallback_first(tmp_path):
    target = tmp_path / "export"
    _write_version(target, "1")
    os.replace(target, tmp_path / ".export.old")  # as a crash between the renames leaves it
    with pytest.raises(RuntimeError):
        with atomic_directory(target):
            raise RuntimeError("this write fails too")
    assert _version(target) == "1"


def test_reading_a_run_recovers_its_model_folder(tmp_path):
    from keras_bertology.errors import CheckpointError
    from keras_bertology.runs import load_run_model

    model_dir = tmp_path / "run" / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "run.json").write_text("{}")
    os.replace(model_dir, tmp_path / "run" / ".model.old")
    with pytest.raises(CheckpointError, match="is damaged"):  # it read run.json, so it found the folder
        load_run_model(tmp_path / "run")
    assert (model_dir / "run.json").is_file()


def test_removed_folders_are_hidden_before_they_are_deleted(tmp_path, monkeypatch):
    target = tmp_path / "step-0000001"
    _write_version(target, "1")
    monkeypatch.setattr(atomic.shutil, "rmtree", _crash_deleting(lambda name: True))
    with pytest.raises(KeyboardInterrupt):
        remove_directory(target)
    monkeypatch.undo()
    assert not target.exists()
    (hidden,) = _entries(tmp_path)
    assert hidden.startswith(".step-0000001.") and _version(tmp_path / hidden) == "1"
    clear_leftovers(tmp_path)
    assert _entries(tmp_path) == []
    _write_version(target, "2")
    remove_directory(target)
    assert _entries(tmp_path) == []


def test_clear_leftovers_finishes_interrupted_writes(tmp_path):
    for name in ("lost", "swapped", ".swapped.old", ".lost.old", ".new.a1b2.tmp", "kept"):
        _write_version(tmp_path / name, name)
    shutil.rmtree(tmp_path / "lost")  # as if a fallback swap died between its renames
    clear_leftovers(tmp_path)
    assert _entries(tmp_path) == ["kept", "lost", "swapped"]
    assert _version(tmp_path / "lost") == ".lost.old"
    assert _version(tmp_path / "swapped") == "swapped"


def _record_syncs_and_moves(monkeypatch, mover_owner, mover_name):
    """Log ("sync", path) for every fsync and ("move", destination) for every call of the mover."""
    events = []
    real_fsync, real_move = os.fsync, getattr(mover_owner, mover_name)

    def fsync(descriptor):
        events.append(("sync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def move(source, destination):
        events.append(("move", str(destination)))
        real_move(source, destination)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(mover_owner, mover_name, move)
    return events


def test_folders_are_flushed_before_they_are_moved_into_place(tmp_path, monkeypatch):
    """Without fsync a power cut after the rename can leave the new name pointing at empty files."""
    events = _record_syncs_and_moves(monkeypatch, atomic, "_replace_directory")
    target = tmp_path / "export"
    with atomic_directory(target) as staging:
        (staging / "weights").write_text("w")
    moved = events.index(("move", str(target)))
    assert {("sync", str(staging / "weights")), ("sync", str(staging))} <= set(events[:moved])
    assert events[moved + 1:] == [("sync", str(tmp_path))]


def test_files_are_flushed_before_they_are_moved_into_place(tmp_path, monkeypatch):
    events = _record_syncs_and_moves(monkeypatch, atomic.os, "replace")
    target = tmp_path / "metrics.json"
    with atomic_file(target) as staging:
        staging.write_text("{}")
    assert events == [("sync", str(staging)), ("move", str(target)), ("sync", str(tmp_path))]


@pytest.fixture(params=[0o022, 0o077, 0o002], ids=oct)
def umask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_outputs_get_umask_modes(tmp_path, umask):
    assert atomic.current_umask() == umask
    folder = tmp_path / "export"
    with atomic_directory(folder) as staging:
        (staging / "saved_model.pb").write_text("model")
        (staging / "assets").mkdir()
    assert _mode(folder) == 0o777 & ~umask
    assert _mode(folder / "saved_model.pb") == 0o666 & ~umask
    assert _mode(folder / "assets") == 0o777 & ~umask
    _write_version(folder, "2")  # replacing keeps the modes right too
    assert _mode(folder) == 0o777 & ~umask
    target = tmp_path / "metrics.json"
    with atomic_file(target) as staging:
        staging.write_text("{}")
    assert _mode(target) == 0o666 & ~umask


def test_atomic_file_keeps_suffix_and_cleans_up(tmp_path):
    target = tmp_path / "step-1.weights.h5"
    with pytest.raises(RuntimeError):
        with atomic_file(target) as staging:
            assert staging.name.endswith(".weights.h5")
            staging.write_text("partial")
            raise RuntimeError("crash")
    assert _entries(tmp_path) == []
    with atomic_file(target) as staging:
        staging.write_text("done")
    assert target.read_text() == "done"


@pytest.mark.parametrize("writer", [atomic_file, atomic_directory])
def test_a_full_disk_names_the_output_being_written(tmp_path, writer):
    """A write into a full disk raises an OSError that names no file; the error names the output, so the
    command's one line says where (an error that names its file keeps it)."""
    target = tmp_path / "out" / "results.json"
    with pytest.raises(OSError) as full:
        with writer(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(target)
    with pytest.raises(OSError) as named:
        with writer(target):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), "/elsewhere")
    assert named.value.filename == "/elsewhere"


KILLED_WRITER = """
import sys, time
from keras_bertology.atomic import atomic_directory, atomic_file
with atomic_directory(sys.argv[1]) as staging, atomic_file(sys.argv[2]) as staged_file:
    (staging / "saved_model.pb").write_text("half")
    staged_file.write_text("half")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_a_killed_writers_staging_is_removed_by_the_next_write(tmp_path):
    """`kill -9` in the middle of a write leaves its staging; the next write of the same output removes it."""
    import signal
    import subprocess
    import sys

    target, file = tmp_path / "export", tmp_path / "run" / "model.keras"
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target), str(file)], stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout.readline() == "writing\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    left = [path.name for path in tmp_path.iterdir() if path.name.startswith(".export.")]
    assert len(left) == 1 and left[0].startswith(f".export.{writer.pid}@")
    assert [path.name for path in file.parent.iterdir() if path.name.startswith(".model.keras.")]
    _write_version(target, "1")
    with atomic_file(file) as staging:
        staging.write_text("whole")
    assert _entries(tmp_path) == ["export", "run"] and _entries(file.parent) == ["model.keras"]


def test_only_staging_of_a_process_gone_from_this_machine_is_removed(tmp_path):
    """Kept: a live process's staging (ours), another machine's, an older version's (no owner), another
    output's, and anything not named as staging."""
    import socket
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    host = socket.gethostname()
    kept = [f".export.{os.getpid()}@{host}.abcd1234.tmp", f".export.{gone}@another-host.abcd1234.tmp",
            ".export.abcd1234.tmp", f".exports.{gone}@{host}.abcd1234.tmp", f".export.{gone}@{host}.notes.tmp.txt",
            "notes"]
    for name in kept:
        (tmp_path / name).mkdir()
    (tmp_path / f".export.{gone}@{host}.abcd1234.tmp").mkdir()
    _write_version(tmp_path / "export", "1")
    assert _entries(tmp_path) == sorted(kept + ["export"])
