"""One writer per output folder: an exclusive advisory lock on a file inside it.

A command that writes a folder holds `flock(LOCK_EX)` on FOLDER/.bertology.lock
for as long as it writes. The kernel drops the lock when the process ends, by
any means (`kill -9` included), so a crashed run never leaves a stale lock and
`--resume` works at once. The file itself is never deleted: unlinking a lock
file lets two processes lock two different files of the same name. It holds
the holder's process id, so a refused writer can say who holds the folder.
"""

import errno
import fcntl
import os
import sys
from pathlib import Path

from keras_bertology.errors import ConfigError

LOCK_FILE = ".bertology.lock"
# What flock answers on file systems that do not lock (some NFS, FUSE and bucket mounts).
_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


class FolderLock:
    """An exclusive lock on `folder`, taken at construction (`flag` names the folder in messages)."""

    def __init__(self, folder, flag):
        self.folder = Path(folder)
        path = self.folder / LOCK_FILE
        try:
            self._descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as error:
            raise ConfigError(f"{flag} {self.folder} cannot be written: {error.strerror}") from None
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in _NO_LOCKS:  # some network and FUSE mounts: write unguarded rather than not at all
                print(f"bertology: warning: {self.folder} is on a file system without file locks: a second "
                      "process writing it at the same time would not be refused", file=sys.stderr)
                return
            holder = _read_holder(self._descriptor)
            os.close(self._descriptor)
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise ConfigError(f"{flag} {self.folder} cannot be locked: {error.strerror}") from None
            raise ConfigError(f"{flag} {self.folder} is being written by another bertology process "
                              f"({f'pid {holder}' if holder else 'its pid unknown'}); wait for it to end, or "
                              "choose another folder") from None
        os.ftruncate(self._descriptor, 0)
        os.pwrite(self._descriptor, f"{os.getpid()}\n".encode(), 0)  # after the lock: never the holder's

    def release(self):
        """Drop the lock (closing the file is what releases it); the file stays for the next writer."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def _read_holder(descriptor):
    """The process id the holder wrote, or None (it may not have written it yet)."""
    try:
        text = os.pread(descriptor, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
