"""Keep TensorFlow's native start-up notices out of the command line's output.

TensorFlow's C++ runtime writes informational lines straight to file
descriptor 2 at import and first use (oneDNN notices, "Could not find cuda
drivers", "failed call to cuInit", CPU feature hints), whatever
TF_CPP_MIN_LOG_LEVEL says. `quiet_native_logs` routes descriptor 2 through a
pipe and drops exactly those lines; everything else (warnings, errors, our
own messages) passes through in order.
"""

import contextlib
import os
import re
import sys
import threading

_NOISE = re.compile(
    r"^(?:"
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|I\d{4} [\d:.]+ +\d+ \S+:\d+\] .*"  # native INFO lines
    r"|[EW]\d{4} [\d:.]+ +\d+ \S+:\d+\] .*(?:cuInit|CUDA|cuda|cuDNN|cuFFT|cuBLAS|TensorRT|oneDNN).*"
    r"|To enable the following instructions: .*in other operations, rebuild TensorFlow.*"
    r"|WARNING:root:apitools not found, and bigquery client libraries are not available.*"  # Beam's workers
    r"|INFO:__main__:Logging handler created\."
    r")$"
)


def is_noise(line):
    """Whether `line` (without its newline) is a native notice with nothing for the user."""
    return bool(_NOISE.match(line))


# Written by this process after its last line of the block: the forwarder's cue that everything before it
# is out. A child process may hold the pipe open past the block (multiprocessing's resource tracker
# inherits descriptor 2 and lives until this process exits), so the end of the pipe cannot be the cue.
_END = b"\0bertology: end of the quiet block\n"


@contextlib.contextmanager
def quiet_native_logs():
    """Filter descriptor 2 for the duration of the block."""
    sys.stderr.flush()
    real_stderr = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    caught_up = threading.Event()
    # The forwarder writes to a descriptor of its own, which it closes whenever it quits (even mid-block).
    forwarder = threading.Thread(target=_forward, args=(read_end, os.dup(real_stderr), caught_up), daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real_stderr, 2)
        os.close(real_stderr)
        try:
            os.write(write_end, _END)
        except OSError:  # the forwarder has quit (the real stderr's reader went away): nothing to wait for
            pass
        os.close(write_end)
        # The block's last lines come out before whatever the caller prints next (on a loaded machine that
        # can take seconds); lines of children still running go on through the forwarder.
        caught_up.wait(timeout=60)


def _forward(read_end, destination, caught_up):
    try:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                ends = line.endswith(_END)
                if ends:  # after a child's unfinished line, if any
                    line = line[:-len(_END)] + (b"\n" if len(line) > len(_END) else b"")
                if line and not is_noise(line.decode("utf-8", "replace").rstrip("\r\n")):
                    os.write(destination, line)
                if ends:
                    caught_up.set()
    except OSError:  # the real stderr went away (its reader quit): nothing left to show the lines to
        pass
    finally:
        caught_up.set()
        os.close(destination)
