"""Checks on output folders, made before any slow step so a bad path fails at once."""

import os
import tempfile
from pathlib import Path

from keras_bertology.errors import ConfigError


def check_output_folder(path, flag, replaced=False):
    """Refuse `path` (given as `flag`) when no folder can be written there.

    `replaced`: the folder is written beside itself and swapped in (exports),
    so its parent must take new entries; otherwise the folder itself must.
    Probes by creating and removing a hidden folder, which also catches
    read-only file systems and /proc, where permission bits say nothing.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path} is a file; give a folder path")
    probe_in = path.parent if replaced or not path.exists() else path
    while not probe_in.exists():
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise ConfigError(f"{flag} {path} cannot be created: {probe_in} is a file")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bertology-probe-", dir=probe_in))
    except OSError as error:
        raise ConfigError(f"{flag} {path} cannot be written: {error.strerror} in {probe_in}") from None
