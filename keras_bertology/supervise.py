"""A JAX run of several processes, in a child process watched by a small parent that holds no JAX.

JAX's distributed runtime ends a process at once, natively (SIGABRT, with a stack trace), when the
coordination service it talks to goes away: when the job's coordinator, process 0, dies. Nothing in that
process can then say what happened. The parent passes the child's output through, leaves out that native
stack trace, and turns such an end into one line and exit status 2, as `keras_distribution.watch_processes`
does for the other processes' deaths. The child dies with its parent (Linux's parent-death signal), so a
parent killed outright leaves no orphan training on.
"""

import ctypes
import os
import re
import signal
import subprocess
import sys

SUPERVISED = "BERTOLOGY_SUPERVISED"  # set in the child: it runs the command itself
_FATAL = "Terminating process because the JAX distributed service detected fatal errors"
# The coordination client's native error lines that come before it.
_COORDINATION_LOG = re.compile(r"^[EWF]\d{4} [\d:.]+ +\d+ (coordination_service\w*|preemption_sync_manager|client)"
                               r"\.(cc|h):\d+\]")
_PR_SET_PDEATHSIG = 1

LOST_JOB = ("bertology: error: JAX's distributed runtime ended this process: another process of the job "
            "stopped (its coordinator, process 0, or one it reported); start every process again with the "
            "same command to resume from the newest checkpoint")


def needs_supervision(command, backend, strategy):
    """A pretraining on JAX over several processes, not already in the supervised child."""
    several = strategy == "multiworker" or (
        strategy == "auto" and int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES") or 1) > 1)
    return command == "pretrain" and backend == "jax" and several and not os.environ.get(SUPERVISED)


def supervise(command):
    """Run `command` (an argv list) in a child and return the exit status this process should end with."""
    child = subprocess.Popen(command, env={**os.environ, SUPERVISED: "1"}, stderr=subprocess.PIPE,
                             preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    previous = {number: signal.signal(number, handler) for number, handler in (
        (signal.SIGTERM, lambda number, frame: child.send_signal(number)),  # its checkpointed stop
        (signal.SIGINT, signal.SIG_IGN))}  # Ctrl-C reaches the child from the terminal itself
    fatal = False
    try:
        for line in child.stderr:
            text = line.decode("utf-8", "replace")
            fatal = fatal or _FATAL in text
            if not fatal and not _COORDINATION_LOG.match(text):  # native reports and stack traces left out
                sys.stderr.write(text)
                sys.stderr.flush()
        status = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if fatal or status == -signal.SIGABRT:
        print(LOST_JOB, file=sys.stderr)
        return 2
    return status if status >= 0 else 128 - status


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
