"""Output folders: no command writes into a folder it did not make, and one process writes a folder at a time.

Every command with an output folder is run against (1) a folder holding a
user's own files, which must be refused with its bytes untouched, (2) a folder
another process holds the lock of, which must be refused at once naming that
process. Every command but the study (whose smallest run takes minutes) is
then run as a real concurrent pair: the second writer refused while the first
is stopped mid-write, the first's output then identical to that of a run that
was alone.
"""

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import transformers

from keras_bertology.cli import main
from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.errors import ConfigError
from keras_bertology.folder_lock import LOCK_FILE, FolderLock
from keras_bertology.output_paths import (CONVERTED_RUN, PRETRAINING_RUN, SAVED_MODEL, STUDY,
                                          check_output_folder, claim_output_folder)
from keras_bertology.runs import load_run_model
from forked_python import start_python

# Each command with the flag of its output folder; "{folder}" is the folder under test, "{new}" a fresh
# folder for the command's other output. The other inputs are never read: the folder is refused first.
COMMANDS = {
    "pretrain --out": ["pretrain", "--out", "{folder}", "--no-export"],
    "pretrain --export": ["pretrain", "--out", "{new}", "--export", "{folder}"],
    "finetune --out": ["finetune", "--task", "bbc-news", "--from", "{new}/run", "--out", "{folder}", "--no-export"],
    "finetune --export": ["finetune", "--task", "bbc-news", "--from", "{new}/run", "--out", "{new}",
                          "--export", "{folder}"],
    "prepare --out": ["prepare", "--out", "{folder}"],
    "study --out": ["study", "--scale", "smoke", "--out", "{folder}"],
    "export --out": ["export", "{new}/run", "--out", "{folder}"],
    "convert --out": ["convert", "--from-hf", "{new}/hf", "--out", "{folder}"],
}


def _argv(name, folder, new):
    return [arg.replace("{folder}", str(folder)).replace("{new}", str(new)) for arg in COMMANDS[name]]


def _snapshot(folder):
    """Every entry under `folder` with its bytes (files) and mode: what 'untouched' compares."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            content = open(path, "rb").read() if name in files else None
            found[os.path.relpath(path, folder)] = (content, os.stat(path).st_mode)
    return found


def _refused(capsys, argv):
    """The one error line of a refused command (exit status 2, no traceback)."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("bertology: error: "), err
    return lines[0]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_folder_of_someone_elses_files_is_refused_and_left_byte_identical(tmp_path, capsys, name):
    folder = tmp_path / "mine"
    (folder / "photos").mkdir(parents=True)
    (folder / "notes.txt").write_text("my own notes")
    (folder / "photos" / "cat.jpg").write_bytes(bytes(range(256)))
    before = _snapshot(folder)
    line = _refused(capsys, _argv(name, folder, tmp_path / "new"))
    assert f"{folder} holds files that bertology did not write (notes.txt, photos)" in line
    assert _snapshot(folder) == before
    assert not (tmp_path / "new").exists()  # the command's other output was not made either


@pytest.mark.parametrize("name,kind_files,what", [
    ("convert --out", {"options.json": "{}"}, "a pretraining run"),
    ("export --out", {"model/run.json": "{}", "options.json": "{}"}, "a pretraining run"),
    ("pretrain --out", {"saved_model.pb": "", "assets/bertology.json": "{}"}, "a SavedModel"),
    ("study --out", {"manifest.json": "{}"}, "prepared data"),
    ("finetune --out", {"study.json": "{}"}, "a study"),
    ("prepare --out", {"results.json": "{}"}, "fine-tuning results"),
])
def test_another_commands_output_is_refused(tmp_path, capsys, name, kind_files, what):
    folder = tmp_path / "theirs"
    for path, text in kind_files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    before = _snapshot(folder)
    line = _refused(capsys, _argv(name, folder, tmp_path / "new"))
    assert f"{folder} holds {what}" in line and "choose another folder" in line
    assert _snapshot(folder) == before


def test_a_folder_is_recognised_by_what_the_command_wrote_there(tmp_path):
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "run.json").write_text("{}")
    check_output_folder(run, "--out", CONVERTED_RUN)  # an earlier conversion is replaced
    (run / "options.json").write_text("{}")  # a finished pretraining also holds model/run.json
    check_output_folder(run, "--out", PRETRAINING_RUN)
    with pytest.raises(ConfigError, match="holds a pretraining run"):
        check_output_folder(run, "--out", CONVERTED_RUN)
    export = tmp_path / "export"
    (export / "assets").mkdir(parents=True)
    (export / "assets" / "bertology.json").write_text("{}")
    with pytest.raises(ConfigError, match="did not write"):  # no graph: not a SavedModel
        check_output_folder(export, "--out", SAVED_MODEL, replaced=True)
    (export / "saved_model.pb").write_bytes(b"")
    check_output_folder(export, "--out", SAVED_MODEL, replaced=True)
    study = tmp_path / "study"  # a finished study holds results.json, as fine-tuning results do
    study.mkdir()
    (study / "study.json").write_text("{}")
    (study / "results.json").write_text("{}")
    check_output_folder(study, "--out", STUDY)
    killed = tmp_path / "killed"  # a command killed before it wrote what marks its kind: ours all the same
    killed.mkdir()
    (killed / LOCK_FILE).write_text("123\n")
    (killed / "data").mkdir()
    check_output_folder(killed, "--out", STUDY)


def test_a_failed_command_removes_the_folder_it_made_and_keeps_one_it_did_not(tmp_path):
    made, given = tmp_path / "made", tmp_path / "given"
    given.mkdir()
    for folder in (made, given):
        with pytest.raises(RuntimeError), claim_output_folder(folder, "--out", STUDY):
            assert (folder / LOCK_FILE).read_text() == f"{os.getpid()}\n"
            raise RuntimeError("the command failed")
    assert not made.exists() and given.is_dir()


def test_out_inside_export_is_refused(tmp_path, capsys):
    line = _refused(capsys, ["pretrain", "--out", str(tmp_path / "e" / "run"), "--export", str(tmp_path / "e")])
    assert "lies inside --export" in line
    assert not (tmp_path / "e").exists()


@pytest.fixture()
def holder(tmp_path):
    """A process holding the lock of a folder, as a command writing it would."""
    processes = []

    def hold(folder):
        folder.mkdir(parents=True, exist_ok=True)
        code = "import sys; from keras_bertology.folder_lock import FolderLock; FolderLock(sys.argv[1], '--out'); " \
               "print('held', flush=True); sys.stdin.read()"
        process = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline() == "held\n"
        processes.append(process)
        return process.pid

    yield hold
    for process in processes:
        process.communicate("")


@pytest.mark.parametrize("name", COMMANDS)
def test_a_folder_another_process_writes_is_refused_at_once(tmp_path, capsys, holder, name):
    folder = tmp_path / "busy"
    pid = holder(folder)
    before = _snapshot(folder)
    started = time.monotonic()
    line = _refused(capsys, _argv(name, folder, tmp_path / "new"))
    assert f"{folder} is being written by another bertology process (pid {pid})" in line
    assert time.monotonic() - started < 30  # refused before any slow step
    assert _snapshot(folder) == before
    assert not (tmp_path / "new").exists()


def test_the_lock_goes_with_its_holder_however_it_ends(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    code = "import sys, time; from keras_bertology.folder_lock import FolderLock; FolderLock(sys.argv[1], '--out'); " \
           "print('held', flush=True); time.sleep(60)"
    process = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "held\n"
    with pytest.raises(ConfigError, match=f"pid {process.pid}"):
        FolderLock(folder, "--out")
    process.send_signal(signal.SIGKILL)
    process.wait()
    FolderLock(folder, "--out").release()  # at once: no stale lock


def test_a_file_system_without_locks_is_written_with_a_warning(tmp_path, monkeypatch, capsys):
    def no_locks(descriptor, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with claim_output_folder(tmp_path / "run", "--out", STUDY):
        (tmp_path / "run" / "study.json").write_text("{}")
    assert "without file locks" in capsys.readouterr().err
    assert (tmp_path / "run" / "study.json").is_file()


# A real command stopped while it writes, for each way a command claims its folders: one folder
# (convert), --out with its --export (claim_outputs: pretrain and finetune) and a folder replaced whole
# (prepare, and export). Every command's refusal of a held folder: the holder tests above.
def _start_stopped(argv, folder):
    """A `bertology` process started with `argv` (forked, forked_python), stopped (SIGSTOP) as soon as it holds
    `folder`."""
    process = start_python([sys.executable, "-m", "keras_bertology.cli", *argv])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        lock = folder / LOCK_FILE
        if lock.is_file() and lock.read_text().strip() == str(process.pid):
            process.send_signal(signal.SIGSTOP)
            return process
        time.sleep(0.005)
    raise AssertionError(f"{argv} never held {folder}: {process.communicate()[1][-2000:]}")


def _second_writer_refused(capsys, first, folder, argv):
    """While `first` is stopped mid-write, `argv` is refused and changes nothing; then `first` goes on (and is
    killed if a check fails first: a stopped process left behind holds its forking parent)."""
    try:
        before = _snapshot(folder)
        line = _refused(capsys, argv)
        assert f"{folder} is being written by another bertology process (pid {first.pid})" in line
        assert _snapshot(folder) == before
    except BaseException:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
        raise
    first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]


def test_a_second_conversion_into_a_folder_being_written_is_refused(tmp_path, capsys):
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=24, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(str(tmp_path / "hf"))
    argv = ["convert", "--from-hf", str(tmp_path / "hf"), "--out"]
    assert main([*argv, str(tmp_path / "alone")]) == 0
    capsys.readouterr()
    first = _start_stopped([*argv, str(tmp_path / "run")], tmp_path / "run")
    _second_writer_refused(capsys, first, tmp_path / "run", [*argv, str(tmp_path / "run")])
    alone, run = (load_run_model(tmp_path / name).backbone for name in ("alone", "run"))
    for ours, theirs in zip(run.weights, alone.weights):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=ours.path)


@pytest.fixture(scope="module")
def converted_run(tmp_path_factory):
    """A tiny converted BERT with a WordPiece vocabulary: a run folder that exports and fine-tunes."""
    folder = tmp_path_factory.mktemp("converted")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=24, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(str(folder / "hf"))
    (folder / "hf" / "vocab.txt").write_text("\n".join(words) + "\n")
    assert main(["convert", "--from-hf", str(folder / "hf"), "--out", str(folder / "run")]) == 0
    return folder / "run"


def test_a_second_finetuning_into_a_folder_being_written_is_refused(tmp_path, capsys, converted_run):
    task = tmp_path / "task"
    task.mkdir()
    for split, rows in (("train", 24), ("test", 8)):
        lines = [f"w{i % 7} w{(3 * i) % 11} w{i % 5}\t{'ab'[i % 2]}" for i in range(rows)]
        (task / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(lines) + "\n")
    argv = ["finetune", "--task", str(task), "--from", str(converted_run), "--epochs", "1", "--batch-size", "8",
            "--seq-len", "16", "--no-export", "--out"]
    assert main([*argv, str(tmp_path / "alone")]) == 0
    capsys.readouterr()
    first = _start_stopped([*argv, str(tmp_path / "run")], tmp_path / "run")
    _second_writer_refused(capsys, first, tmp_path / "run", [*argv, str(tmp_path / "run")])
    alone, run = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("alone", "run"))
    assert run["step_losses"] == alone["step_losses"] and run["test"] == alone["test"]


def test_a_second_preparation_into_a_folder_being_written_is_refused(tmp_path, capsys):
    argv = ["prepare", "--model", "roberta", "--preset", "roberta-tiny", "--corpus", str(default_corpus_paths()[0]),
            "--vocab-size", "400", "--seq-len", "32", "--workers", "1", "--out"]
    assert main([*argv, str(tmp_path / "alone")]) == 0
    capsys.readouterr()
    first = _start_stopped([*argv, str(tmp_path / "data")], tmp_path / "data")
    _second_writer_refused(capsys, first, tmp_path / "data", [*argv, str(tmp_path / "data")])
    alone, data = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("alone", "data"))
    # The same bytes (the stopped run is another process, so another string-hash seed: records must not
    # depend on it).
    assert data["shards"] == alone["shards"] and data["tokenizer_sha256"] == alone["tokenizer_sha256"]
    for shard in alone["shards"]:
        assert (tmp_path / "data" / shard["file"]).read_bytes() == (tmp_path / "alone" / shard["file"]).read_bytes()
