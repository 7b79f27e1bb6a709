"""Atomic writes: an export or checkpoint is either complete at its path or absent.

Everything is written next to the destination under a hidden temporary name
and moved into place only after it was fully written, so a crash or an error
half-way never leaves a truncated model where a reader would find it.
Replacing a folder swaps old and new in one step (Linux `renameat2` with
RENAME_EXCHANGE), so readers always see one complete version. Where the
kernel or file system cannot exchange, the old folder is first renamed to
`.NAME.old`; `recover_directory` (called before every write and by readers)
puts it back if a crash came between the two renames.

Outputs get the modes `open()` and `mkdir()` would give them under the
process umask, not the private 0600/0700 of temporary files, so a server
running as another user can read an export.
"""

import contextlib
import ctypes
import errno
import os
import shutil
import tempfile
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM}


def current_umask():
    """The process umask, read without changing it where /proc allows."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _backup_path(path):
    return path.with_name(f".{path.name}.old")


def recover_directory(path):
    """Undo an interrupted fallback swap: bring `.NAME.old` back when NAME is missing."""
    path = Path(path)
    backup = _backup_path(path)
    if backup.is_dir() and not path.exists():
        os.replace(backup, path)


@contextlib.contextmanager
def atomic_directory(path):
    """Yield a temporary directory that replaces `path` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(path)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield staging
        os.chmod(staging, 0o777 & ~current_umask())
        _replace_directory(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # after an exchange it holds the old version


def _replace_directory(source, destination):
    """Move `source` to `destination`; an existing destination is swapped into `source`."""
    if not destination.exists():
        os.replace(source, destination)
        return
    try:
        exchange(source, destination)
    except OSError as error:
        if error.errno not in _NO_EXCHANGE:
            raise
        backup = _backup_path(destination)
        shutil.rmtree(backup, ignore_errors=True)
        os.replace(destination, backup)
        os.replace(source, destination)
        shutil.rmtree(backup, ignore_errors=True)


def exchange(first, second):
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); OSError where unsupported."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    result = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(second))


@contextlib.contextmanager
def atomic_file(path):
    """Yield a temporary file path that replaces `path` when the block succeeds.

    The temporary name keeps the destination's suffix, since Keras picks the
    file format from it (`.weights.h5`, `.keras`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix="".join(path.suffixes), dir=path.parent)
    os.close(handle)
    try:
        yield Path(staging)
        os.chmod(staging, 0o666 & ~current_umask())
        os.replace(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)
