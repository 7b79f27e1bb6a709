"""Several `bertology` commands in ONE new process, each through `cli.main` in turn: one start-up of TensorFlow,
Keras and JAX for all of them, for checks that need a process other than pytest's (another backend, simulated
devices) but not one process each."""

import json
import subprocess
import sys
from pathlib import Path

# Each case sees the environment of the process plus its own variables, as its own process would; an exception
# that escapes `main` is printed as the interpreter would print it, so a check for "Traceback" still sees it.
_DRIVER = """
import contextlib, io, json, os, sys, traceback
from keras_bertology.cli import main
cases, results = json.loads(sys.argv[1]), {}
base = dict(os.environ)
for name, argv, env in cases:
    os.environ.clear()
    os.environ.update({**base, **env})
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit:
            status = exit.code
        except BaseException:
            traceback.print_exc()
            status = 1
    results[name] = [status, err.getvalue()]
with open(sys.argv[2], "w") as out:
    json.dump(results, out)
"""


def run_in_one_process(cases, folder, env, timeout):
    """{name: (exit status, stderr)} of `cases`, each [name, argv, its own environment variables], run in that
    order in one new process with `env`; the process itself must end well."""
    results = Path(folder) / "results.json"
    # A new interpreter, not `forked_python`: a case's `--backend` picks Keras' backend before Keras is imported.
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(cases), str(results)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: tuple(result) for name, result in json.loads(results.read_text()).items()}
