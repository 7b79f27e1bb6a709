"""tests/support/forked_python.py: a script forked from a parent that imported TensorFlow gives what it gives in a
new interpreter, and only the start-up differs."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from forked_python import ForkedProcess, run_python, start_python

SCRIPT = textwrap.dedent("""
    import os, sys
    print(sys.argv, os.getcwd(), os.environ.get("SEEN"), __name__, repr(sys.path[0]))
    print("to stderr", file=sys.stderr)
    """)
CASES = {
    "arguments, folder, environment, streams": [sys.executable, "-c", SCRIPT, "first", "second"],
    "exit status": [sys.executable, "-c", "import sys; sys.exit(3)"],
    "exit with a message": [sys.executable, "-c", "import sys; sys.exit('stopped: a reason')"],
    "uncaught exception": [sys.executable, "-c", "raise ValueError('boom')"],
    "interrupted": [sys.executable, "-c", "raise KeyboardInterrupt"],
    "the main module's names": [sys.executable, "-c", "print(sorted(globals()), __loader__)"],
    "killed by a signal": [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
    "a module": [sys.executable, "-m", "keras_bertology.cli", "--version"],
    "a module's error": [sys.executable, "-m", "keras_bertology.cli", "pretrain", "--preset", "nope"],
}


@pytest.mark.parametrize("name", CASES)
def test_a_forked_script_gives_what_a_new_interpreter_gives(name, tmp_path):
    args, env = CASES[name], dict(os.environ, SEEN="yes")
    expected = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    forked = run_python(args, env=env, cwd=tmp_path, timeout=300)
    assert (forked.returncode, forked.stdout) == (expected.returncode, expected.stdout)
    # The last line of stderr: a traceback's or the message; TensorFlow's start-up lines come before it in a
    # new interpreter only.
    assert forked.stderr.strip().splitlines()[-1:] == expected.stderr.strip().splitlines()[-1:]


def test_a_script_run_from_a_file_sees_its_folder_first_on_the_path(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "main.py").write_text("import sys, helper\nprint(sys.argv[1:], helper.VALUE, __name__)\n")
    done = run_python([sys.executable, str(tmp_path / "main.py"), "x"], timeout=300)
    assert (done.returncode, done.stdout) == (0, "['x'] 7 __main__\n"), done.stderr[-2000:]


def test_each_forked_process_is_new_and_imports_nothing_of_the_project():
    script = ("import os, random, sys, numpy as np; "
              "print(os.getpid(), os.getppid(), random.random(), np.random.rand(), "
              "[name for name in sys.modules if name.startswith('keras_bertology')])")
    runs = [run_python([sys.executable, "-c", script], timeout=300).stdout.split(maxsplit=4) for _ in range(2)]
    assert runs[0][1] == runs[1][1] != str(os.getpid())  # forked by one parent, not by this process
    assert all(runs[0][field] != runs[1][field] for field in (0, 2, 3))  # new pids, generators seeded afresh
    assert runs[0][4].strip() == "[]"


def test_a_timeout_kills_the_script_and_keeps_what_it_printed():
    script = "import time; print('started', flush=True); time.sleep(60)"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        run_python([sys.executable, "-c", script], timeout=3)
    # Killed, not waited for: its 60 s would run far past this bound.
    assert time.monotonic() - started < 30 and timed_out.value.output == "started\n"
    assert run_python([sys.executable, "-c", "print('next')"], timeout=300).stdout == "next\n"  # the parent goes on


def test_a_call_whose_import_time_variables_differ_gets_what_an_import_with_them_gives(tmp_path):
    # Keras reads its configuration file at import: a parent that imported without this one would not see it.
    (tmp_path / "keras.json").write_text('{"floatx": "float16", "backend": "tensorflow"}')
    script = "import keras; print(keras.config.floatx(), keras.config.backend())"
    for env, expected in (({"KERAS_HOME": str(tmp_path)}, "float16 tensorflow"),
                          ({"KERAS_BACKEND": "jax"}, "float32 jax")):
        done = run_python([sys.executable, "-c", script], env=dict(os.environ, **env), timeout=300)
        assert done.stdout.strip() == expected, done.stderr[-2000:]


def test_a_started_script_runs_beside_the_caller_which_can_stop_and_continue_it(tmp_path):
    """`start_python`: the caller sees it running (poll), signals it by its pid, and reads its streams at the end."""
    import signal

    script = ("import os, sys, time\nprint(os.getpid(), flush=True)\nopen(sys.argv[1], 'w').close()\n"
              "while os.path.exists(sys.argv[1]): time.sleep(0.01)\nprint('to stderr', file=sys.stderr); sys.exit(4)")
    flag = tmp_path / "running"
    process = start_python([sys.executable, "-c", script, str(flag)])
    assert isinstance(process, ForkedProcess) and process.pid != os.getpid()
    deadline = time.monotonic() + 120
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGSTOP)
    flag.unlink()
    time.sleep(0.3)
    assert process.poll() is None  # stopped: it has not seen the flag go
    # Its parent waits on it: a call meanwhile starts a new interpreter instead of waiting behind it.
    assert run_python([sys.executable, "-c", "print(2)"], timeout=300).stdout == "2\n"
    process.send_signal(signal.SIGCONT)
    assert process.communicate(timeout=120) == (f"{process.pid}\n", "to stderr\n") and process.returncode == 4
    assert process.poll() == 4 and run_python([sys.executable, "-c", "print(1)"], timeout=300).stdout == "1\n"
