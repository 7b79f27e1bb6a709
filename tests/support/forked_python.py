"""The tests' Python scripts and commands, each in a new process forked from one that has already imported
TensorFlow (and with it Keras), instead of a new interpreter that imports it again: about 4 s of every such
process on the 2-core CI machine.

The forked process is a new process as a user's is: its own pid, its own TensorFlow runtime (the parent
imported TensorFlow and never ran an op, so no thread pool or device exists before the fork), nothing of
this project imported, the environment, working directory, arguments and standard streams of the call.
What it shares with its parent is what a new interpreter that imported TensorFlow first would hold, except
the hash seed (the same in every process forked from one parent; NumPy's global generator is seeded afresh,
and `random` reseeds itself in a forked child). So a script whose subject is the start-up itself (what
importing TensorFlow prints, an environment variable it sets before an import, such as the CLI's
`--backend`, a module that must not be imported) runs through `subprocess.run`, as does a call whose
environment differs from the parent's in what TensorFlow, Keras or the C libraries read at import
(`_IMPORT_TIME_PREFIXES`): each such environment gets a parent of its own, and the JAX backend
(multithreaded once imported) gets none.
"""

import atexit
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile

# Variables read while TensorFlow and Keras import (log level, oneDNN, the Keras backend, thread and
# allocator settings of the C libraries): a call whose values differ needs a parent that imported with them.
_IMPORT_TIME_PREFIXES = ("TF_", "KERAS_", "CUDA_", "XLA_", "JAX_", "OMP_", "MKL_", "OPENBLAS_", "LD_", "PYTHON",
                         "MALLOC_", "TPU_")

# The parent: imports TensorFlow, then for each request (a JSON line on its standard input) forks a child that
# runs it, answers its pid, waits for it, and answers its exit status.
_PARENT = r"""
import atexit, importlib.machinery, json, os, runpy, signal, sys, traceback, types
import tensorflow  # noqa: F401  what every process forked from here starts with
replies = os.fdopen(os.dup(1), "w")
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)


def _status(exit):
    code = exit.code
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _run(argv):
    main = sys.modules["__main__"] = types.ModuleType("__main__")  # not this loop's module
    if argv[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        main.__dict__.update(__annotations__={}, __loader__=importlib.machinery.BuiltinImporter)
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    elif argv[0] == "-m":
        sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
        runpy._run_module_as_main(argv[1], alter_argv=True)
    else:
        sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def _child(request):
    os.setpgid(0, 0)  # a group of its own, which a timeout kills whole
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                            (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    replies.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.modules["numpy"].random.seed()
    try:
        _run(request["argv"])
        code = 0
    except SystemExit as exit:
        code = _status(exit)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        _child(request)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""

_parents = {}  # {the environment's import-time values: the parent process}


def run_python(args, env=None, cwd=None, timeout=None, check=False):
    """`subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=check)`
    for `args` = [sys.executable, "-c", code | "-m", module | script, ...], in a process forked from a parent
    that imported TensorFlow with `env`'s import-time variables; through `subprocess.run` itself where no
    such parent can serve it (see the module's docstring)."""
    env = dict(os.environ if env is None else env)
    parent = _forking_parent(args, env)
    if parent is None:
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                              check=check)
    process = ForkedProcess(parent, args, env, cwd)
    stdout, stderr = process.communicate(timeout)
    done = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done


def start_python(args, env=None, cwd=None):
    """`subprocess.Popen(args, stdout=PIPE, stderr=PIPE, text=True, env=env, cwd=cwd)`, forked as `run_python`
    forks: a process with `pid`, `returncode`, `poll()`, `send_signal()` and `communicate(timeout)`. Until it
    has ended (and its end been read), the calls that would fork from its parent start a new interpreter."""
    env = dict(os.environ if env is None else env)
    parent = _forking_parent(args, env)
    if parent is None:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    return ForkedProcess(parent, args, env, cwd)


class ForkedProcess:
    """A process the parent forked, its standard streams written to files that are read once it has ended."""

    def __init__(self, parent, args, env, cwd):
        self.args, self.returncode, self._parent, self._output = args, None, parent, None
        self._folder = tempfile.TemporaryDirectory(prefix="forked-python-")
        self._streams = [os.path.join(self._folder.name, name) for name in ("stdout", "stderr")]
        for path in self._streams:
            open(path, "wb").close()
        request = {"argv": list(map(str, args[1:])), "env": env, "cwd": os.fspath(cwd or os.getcwd()),
                   "stdout": self._streams[0], "stderr": self._streams[1]}
        parent.stdin.write(json.dumps(request) + "\n")
        parent.stdin.flush()
        self.pid = _reply(parent, None)["pid"]
        parent.running = self

    def poll(self):
        if self.returncode is None:
            try:
                self._ended(_reply(self._parent, 0)["status"])
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def send_signal(self, signum):
        if self.returncode is None:
            os.kill(self.pid, signum)

    def communicate(self, timeout=None):
        """(stdout, stderr) once the process has ended; after `timeout` seconds its process group is killed and
        TimeoutExpired raised, with what it wrote."""
        if self.returncode is None:
            try:
                self._ended(_reply(self._parent, timeout)["status"])
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self._ended(_reply(self._parent, None)["status"])
                raise subprocess.TimeoutExpired(self.args, timeout, *self._output) from None
        return self._output

    def _ended(self, status):
        self.returncode, self._output = status, tuple(_read(path) for path in self._streams)
        self._parent.running = None
        self._folder.cleanup()


def _forking_parent(args, env):
    """The parent that forks `args` with `env`, or None where `subprocess` must start it (see the docstring) or
    the parent waits for a process `start_python` forked (a stopped one would block it)."""
    parent = _parent_for(env) if args[0] == sys.executable and len(args) > 2 else None
    return None if parent is None or parent.running else parent


def _import_time_values(env):
    return tuple(sorted((name, value) for name, value in env.items() if name.startswith(_IMPORT_TIME_PREFIXES)))


def _parent_for(env):
    """The running parent for `env`'s import-time values, started on first use; None for the JAX backend."""
    if env.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return None
    key = _import_time_values(env)
    parent = _parents.get(key)
    if parent is None or parent.poll() is not None:
        parent = _parents[key] = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                                  env=env, cwd=tempfile.gettempdir())
        parent.unread, parent.running = b"", None
    return parent


def _reply(parent, timeout):
    """The parent's next answer; TimeoutExpired when none comes within `timeout` seconds. Read from the pipe's
    descriptor itself: a buffered reader could hold the next answer where `select` does not see it."""
    fd = parent.stdout.fileno()
    while b"\n" not in parent.unread:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("forked python", timeout)
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"the forking parent ended (exit status {parent.wait()})")
        parent.unread += chunk
    line, parent.unread = parent.unread.split(b"\n", 1)
    return json.loads(line)


def _read(path):
    """A stream's text as `subprocess.run(..., text=True)` gives it: the locale's encoding, universal newlines."""
    with open(path, encoding=locale.getpreferredencoding(False), newline=None) as stream:
        return stream.read()


@atexit.register
def _stop_parents():
    for parent in _parents.values():
        if parent.running is not None:  # a started process never waited for (a test failed): the parent waits on it
            os.killpg(parent.running.pid, signal.SIGKILL)
        parent.stdin.close()
        parent.wait()
