"""The command line starts fast and speaks only of its own work: no TensorFlow for --help or
presets, and none of TensorFlow's native start-up notices in any command's output."""

import os
import subprocess
import sys

import pytest

from keras_bertology.native_logs import is_noise
from keras_bertology.pretraining.options import PretrainOptions

ENV = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795359039.214177    2125 port.cc:153] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors.",
    "I0000 00:00:1795359039.215414    2125 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used.",
    "E0000 00:00:1732205341.123456    2125 cuda_executor.cc:1228] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1795359059.653785    2163 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to "
    "use available CPU instructions in performance-critical operations.",
    "E0000 00:00:1795359341.709883    3616 util.cc:131] oneDNN supports DT_INT64 only on platforms with "
    "AVX-512. Falling back to the default Eigen-based implementation if present.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
]
KEPT = [
    "bertology: error: unknown preset 'x'",
    "Traceback (most recent call last):",
    "E0000 00:00:1795359341.709883    3616 op_kernel.cc:1857] OP_REQUIRES failed: out of memory",
    "W0000 00:00:1795359341.709883    3616 loader.cc:12] SavedModel has no variables",
    "UserWarning: something a user should read",
]


@pytest.mark.parametrize("line", NOISE)
def test_native_notices_are_noise(line):
    assert is_noise(line)


@pytest.mark.parametrize("line", KEPT)
def test_everything_else_is_kept(line):
    assert not is_noise(line)


def _run(*args):
    return subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=ENV, timeout=300)


def test_help_and_presets_do_not_start_tensorflow():
    script = ("import sys\nfrom keras_bertology.cli import main\n"
              "assert main(['presets']) == 0\n"
              "heavy = [m for m in ('tensorflow', 'keras', 'torch') if m in sys.modules]\n"
              "assert not heavy, heavy\n"
              "main(['pretrain', '--help'])\n")
    result = _run(script)
    assert result.returncode == 0, result.stderr
    assert "bert-base" in result.stdout and "--learning-rate" in result.stdout
    assert result.stderr == ""


def test_a_command_that_loads_tensorflow_prints_only_its_error():
    result = _run("import sys\nfrom keras_bertology.cli import main\n"
                  "sys.exit(main(['export', '/no/such/run']))")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "bertology: error: /no/such/run is not a finished run folder (no model/run.json); "
        "pass a folder written by `bertology pretrain` or `bertology convert`"
    ]


@pytest.mark.parametrize(
    "steps,log_every,window,windows",
    [(600, 50, 50, 12), (6, 3, 1, 6), (25, 50, 2, 13), (100, 5, 5, 20), (1, 50, 1, 1)],
)
def test_every_run_logs_several_windows(steps, log_every, window, windows):
    options = PretrainOptions(steps=steps, log_every=log_every)
    assert (options.steps_per_window, options.windows) == (window, windows)


# A block that starts a child process which inherits descriptor 2 and outlives it (as multiprocessing's
# resource tracker outlives a study's worker pool): the block's lines come out in order, the noise is
# dropped, and the block ends while the child still runs, instead of waiting for the pipe to close.
OUTLIVING_CHILD = """
import os, subprocess, sys
from keras_bertology.native_logs import quiet_native_logs
with quiet_native_logs():
    os.write(2, b"first line\\n")
    os.write(2, b"I0000 00:00:1795359039.215414    2125 cudart_stub.cc:31] Could not find cuda drivers\\n")
    child = subprocess.Popen([sys.executable, "-c", "import os, time; os.write(2, b'child line'); time.sleep(20)"])
    os.write(2, b"last line\\n")
    import time; time.sleep(1)  # the child's unfinished line is in the pipe before the block ends
print("child running" if child.poll() is None else "child ended", flush=True)
child.kill()
"""


def test_a_child_that_outlives_the_quiet_block_does_not_hold_it_up():
    result = _run(OUTLIVING_CHILD)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "child running\n"
    assert result.stderr.splitlines() == ["first line", "last line", "child line"]


# The reader of the real stderr goes away (`bertology ... 2>&1 | head`): the forwarder quits at its next
# line, and the block still ends quietly.
READER_GONE = """
import os, time
from keras_bertology.native_logs import quiet_native_logs
time.sleep(0.5)  # the parent closes its end of stderr
with quiet_native_logs():
    os.write(2, b"a line nobody reads\\n")
    time.sleep(0.5)
print("block ended", flush=True)
"""


def test_a_quiet_block_ends_quietly_when_nobody_reads_stderr_any_more():
    process = subprocess.Popen([sys.executable, "-c", READER_GONE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=ENV)
    process.stderr.close()
    assert process.stdout.read() == "block ended\n"
    assert process.wait(timeout=60) == 0
