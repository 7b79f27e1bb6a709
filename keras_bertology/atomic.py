"""Atomic writes: an export or checkpoint is either complete at its path or absent.

Everything is written next to the destination under a temporary name and
renamed into place only after it was fully written, so a crash or an error
half-way never leaves a truncated model where a reader would find it.
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_directory(path):
    """Yield a temporary directory that replaces `path` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield staging
        _replace_directory(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace_directory(source, destination):
    """Rename `source` to `destination`, moving an existing destination out of the way first."""
    backup = None
    if destination.exists():
        backup = destination.with_name(f".{destination.name}.old")
        shutil.rmtree(backup, ignore_errors=True)
        os.replace(destination, backup)
    os.replace(source, destination)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


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
        os.replace(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)
