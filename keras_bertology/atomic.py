"""Atomic writes: an export or checkpoint is either complete at its path or absent.

Everything is written next to the destination under a hidden temporary name
(`.NAME.PID@HOST.XXXXXXXX.tmp` for folders), flushed to disk, and moved into
place only after it was fully written, so a crash, a power cut or an error half-way never
leaves a truncated model where a reader would find it. Replacing a folder
swaps old and new in one step (Linux `renameat2` with RENAME_EXCHANGE), so
readers always see one complete version. Where the kernel or file system
cannot exchange, the old folder is first renamed to `.NAME.old`;
`recover_directory` (called before every write, and by readers) puts it back
if a crash came between the two renames. A writer killed outright (`kill -9`)
leaves its staging behind; the name says whose it was, so the next write of
NAME deletes those of this machine's processes that are gone, and nothing else.

Outputs get the modes `open()` and `mkdir()` would give them under the
process umask, not the private 0600/0700 of temporary files, so a server
running as another user can read an export.
"""

import contextlib
import ctypes
import errno
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# Kernels and file systems without the exchange answer EINVAL, ENOSYS or
# ENOTSUP; seccomp filters that do not know renameat2 answer EPERM.
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM}
# File systems that cannot flush (some FUSE mounts) answer these to fsync.
_NO_FSYNC = {errno.EINVAL, errno.ENOTSUP, errno.EBADF}
_STAGING_SUFFIX = ".tmp"


def current_umask():
    """The process umask, read without changing it where /proc allows."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc: set and restore, the only portable way
    os.umask(mask)
    return mask


def _staging_prefix(path):
    """`.NAME.PID@HOST.`, the start of a staging name: whose write it is, for `_remove_stale_staging`."""
    return f".{path.name}.{os.getpid()}@{socket.gethostname()}."


def _remove_stale_staging(path, suffix):
    """Delete what writes of `path` that were killed left beside it: staging named by `_staging_prefix` and
    `suffix`, of a process of this machine that no longer runs. Staging of a live process, of another
    machine (a shared file system), or not named so (another program's, an older version's) stays."""
    owned = re.compile(re.escape(f".{path.name}.") + r"(\d+)@(.+)\.[a-z0-9_]{8}" + re.escape(suffix))
    host = socket.gethostname()
    with contextlib.suppress(OSError):
        for entry in path.parent.iterdir():
            match = owned.fullmatch(entry.name)
            if match is None or match.group(2) != host or _running(int(match.group(1))):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _running(pid):
    """Whether process `pid` exists on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _backup_path(path):
    return path.with_name(f".{path.name}.old")


def recover_directory(path):
    """Undo an interrupted fallback swap: bring `.NAME.old` back when NAME is missing.

    Safe for readers to call before reading; it changes nothing when NAME exists.
    """
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
    # A backup beside an existing NAME is the old half of a finished fallback swap.
    shutil.rmtree(_backup_path(path), ignore_errors=True)
    _remove_stale_staging(path, _STAGING_SUFFIX)
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(path), suffix=_STAGING_SUFFIX, dir=path.parent))
    try:
        with _naming(path):
            yield staging
            os.chmod(staging, 0o777 & ~current_umask())
            _sync_tree(staging)
            _replace_directory(staging, path)
            _sync(path.parent)
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
    _remove_stale_staging(path, "".join(path.suffixes))
    handle, staging = tempfile.mkstemp(prefix=_staging_prefix(path), suffix="".join(path.suffixes), dir=path.parent)
    os.close(handle)
    try:
        with _naming(path):
            yield Path(staging)
            os.chmod(staging, 0o666 & ~current_umask())
            _sync(staging)
            os.replace(staging, path)
            _sync(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)


@contextlib.contextmanager
def _naming(path):
    """An OSError of the block that names no file (a write into a full disk: "No space left on device") names
    `path`, the output it was writing, so the user learns where."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            error.filename = str(path)
        raise


def remove_directory(path):
    """Delete a folder so that readers never see it half deleted: hide it first, then delete it.

    A crash during the deletion leaves a hidden `.NAME.XXXX.tmp` that `clear_leftovers` removes.
    """
    path = Path(path)
    hidden = Path(tempfile.mkdtemp(prefix=_staging_prefix(path), suffix=_STAGING_SUFFIX, dir=path.parent))
    os.replace(path, hidden)  # a directory may replace an empty one
    shutil.rmtree(hidden)


def clear_leftovers(folder):
    """Finish the writes that were killed in `folder`: restore lost folders, delete staging.

    Only for a folder with a single writer (a run's checkpoints): it would also
    delete the staging folder of a write that another process is doing.
    """
    folder = Path(folder)
    for backup in folder.glob(".*.old"):
        recover_directory(folder / backup.name[1:-len(".old")])
    for leftover in [*folder.glob(".*.old"), *folder.glob(f".*{_STAGING_SUFFIX}")]:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)


def _sync_tree(folder):
    """Flush every file and folder under `folder`, so a power cut cannot swap in empty files."""
    for root, _, files in os.walk(folder):
        for name in files:
            _sync(Path(root) / name)
        _sync(root)


def _sync(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _NO_FSYNC:
            raise
    finally:
        os.close(descriptor)
