"""Output folders: which ones a command may write, checked before any slow step.

One rule for every command: an output folder may be absent, empty, or one
this library wrote for the same purpose (a pretraining run to `--resume`, an
earlier export to replace, ...). Anything else, a user's own files or another
command's output, is refused with one line naming the folder and what it
holds, and nothing in it is touched. A claimed folder is locked
(`folder_lock`) for as long as the command writes it, so a second process is
refused at once instead of interleaving its files with the first's.
"""

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from keras_bertology.errors import ConfigError
from keras_bertology.folder_lock import LOCK_FILE, FolderLock

_PROBE_PREFIX = ".bertology-probe-"


@dataclass(frozen=True)
class FolderKind:
    """What a command writes, and how to recognise a folder it wrote earlier: any of `markers` is there
    (and all of `required`)."""

    what: str
    markers: tuple
    required: tuple = ()

    def holds(self, folder):
        return any((folder / marker).exists() for marker in self.markers) and \
            all((folder / path).exists() for path in self.required)


PRETRAINING_RUN = FolderKind("a pretraining run (bertology pretrain)",
                             ("options.json", "checkpoints", "tokenizer/tokenizer.json"))
CONVERTED_RUN = FolderKind("a converted model (bertology convert)", ("model/run.json",))
FINETUNING = FolderKind("fine-tuning results (bertology finetune)", ("results.json",))
STUDY = FolderKind("a study (bertology study)", ("study.json",))
PROBES = FolderKind("linear probes (bertology probe)", ("probes.json",))
PREPARED_DATA = FolderKind("prepared data (bertology prepare)", ("manifest.json",))
SAVED_MODEL = FolderKind("a SavedModel exported by bertology", ("assets/bertology.json",), ("saved_model.pb",))
HF_MODEL = FolderKind("a Hugging Face model exported by bertology", ("bertology.json",), ("config.json",))
ONNX_MODEL = FolderKind("an ONNX model exported by bertology", ("onnx.json",), ("model.onnx",))
# The first kind a folder matches is what it is: a finished pretraining run also holds model/run.json, a
# finished study results.json.
KINDS = (PRETRAINING_RUN, CONVERTED_RUN, STUDY, PREPARED_DATA, FINETUNING, PROBES, SAVED_MODEL, HF_MODEL,
         ONNX_MODEL)


def check_output_folder(path, flag, kind, replaced=False):
    """Refuse `path` (given as `flag`) unless `kind` may be written there.

    `replaced`: the folder is written beside itself and swapped in whole
    (exports, prepared data), so its parent must take new entries. Only reads
    `path`; the writability probe makes and removes a hidden folder in the
    parent (or in `path` when it exists and is written in place), which also
    catches read-only file systems, where permission bits say nothing.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path} is a file; give a folder path")
    if path.is_dir():
        _check_contents(path, flag, kind)
    probe_in = path.parent if replaced or not path.exists() else path
    while not probe_in.exists():
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise ConfigError(f"{flag} {path} cannot be created: {probe_in} is a file")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=_PROBE_PREFIX, dir=probe_in))
    except OSError as error:
        raise ConfigError(f"{flag} {path} cannot be written: {error.strerror} in {probe_in}") from None


def check_separate_folders(out, export_dir):
    """A command's --out must not be, or lie inside, its --export: an export replaces its folder whole."""
    if export_dir is None:
        return
    out_path, export_path = Path(out).resolve(), Path(export_dir).resolve()
    if out_path == export_path or export_path in out_path.parents:
        raise ConfigError(f"--out {out} lies inside --export {export_dir}, which the export replaces whole; "
                          "give two separate folders")


class ClaimedFolder:
    """An output folder checked, created if absent and locked (see `claim_output_folder`)."""

    def __init__(self, path, flag, kind, replaced=False, writer=True):
        self.path = Path(path)
        check_output_folder(self.path, flag, kind, replaced)
        self.created = not self.path.exists()
        self.lock = None
        if not writer:  # a worker of a cluster other than the chief: it reads, the chief writes
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"{flag} {self.path} cannot be created: {error.strerror}") from None
        try:
            self.lock = FolderLock(self.path, flag)
        except ConfigError:
            self._remove_if_unused()
            raise

    def release(self, failed=False):
        """Unlock; after a failure, a folder this claim created and nobody wrote into is removed again."""
        if self.lock is None:
            return
        if failed:
            self._remove_if_unused()
        self.lock.release()
        self.lock = None

    def _remove_if_unused(self):
        if self.created and self.path.is_dir() and not _entries(self.path):
            shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def claim_output_folder(path, flag, kind, replaced=False, writer=True):
    """Hold `path` as `kind`'s output folder for the block (checked, created, locked); yields the claim,
    whose `created` says whether this command made the folder."""
    claim = ClaimedFolder(path, flag, kind, replaced, writer)
    try:
        yield claim
    except BaseException:
        claim.release(failed=True)
        raise
    claim.release()


@contextlib.contextmanager
def claim_outputs(out, kind, export_dir=None, writer=True):
    """Claim a command's --out as `kind`, and its --export (a SavedModel) when given, for the block;
    yields the claim of --out."""
    check_separate_folders(out, export_dir)
    with contextlib.ExitStack() as claims:
        claim = claims.enter_context(claim_output_folder(out, "--out", kind, writer=writer))
        if export_dir:
            claims.enter_context(claim_output_folder(export_dir, "--export", SAVED_MODEL, replaced=True,
                                                     writer=writer))
        yield claim


def _entries(folder):
    """What `folder` holds besides what a writer of this library leaves in passing (its lock file,
    hidden staging folders of interrupted atomic writes, probes)."""
    return sorted(entry.name for entry in folder.iterdir()
                  if entry.name != LOCK_FILE and not entry.name.startswith(_PROBE_PREFIX)
                  and not (entry.name.startswith(".") and entry.name.endswith((".tmp", ".old"))))


def folder_kind(path):
    """The kind of output `path` holds (the first of KINDS it matches), or None."""
    return next((kind for kind in KINDS if kind.holds(Path(path))), None)


def _check_contents(path, flag, kind):
    entries = _entries(path)
    if not entries:
        return
    found = folder_kind(path)
    if found is kind:
        return
    if found is not None:
        raise ConfigError(f"{flag} {path} holds {found.what}, not {kind.what}; choose another folder")
    if (path / LOCK_FILE).is_file():  # a command of this library that was killed before its first marker
        return
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    raise ConfigError(f"{flag} {path} holds files that bertology did not write ({shown}); give a new or "
                      "empty folder: nothing in it was changed")
