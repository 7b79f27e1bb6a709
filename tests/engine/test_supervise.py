"""A JAX run of several processes runs in a child watched by a parent without JAX (`supervise`): the
native end JAX's runtime gives a process whose coordinator died becomes one line and exit status 2."""

import signal
import sys

from keras_bertology.supervise import LOST_JOB, needs_supervision, supervise

# What a process of the job writes when its coordinator dies, then SIGABRT (from a run killed by hand).
NATIVE_END = r"""
import os, sys
sys.stdout.write("Epoch 4/100\n"); sys.stdout.flush()
sys.stderr.write("training goes on\n"
                 "E1129 13:33:09.387422   16696 coordination_service_agent.cc:289] Polled an error from coordination "
                 "service (this can be an error from this or another task).\n"
                 "F1129 13:33:09.387501   16696 client.h:80] Terminating process because the JAX distributed service "
                 "detected fatal errors. This most likely indicates that another task died\n"
                 "*** Check failure stack trace: ***\n    @     0x7f20f1beb505  std::_Function_handler<>::_M_invoke()\n")
sys.stderr.flush()
os.abort()
"""


def test_a_process_ended_by_jaxs_runtime_says_so_in_one_line(capfd):
    assert supervise([sys.executable, "-c", NATIVE_END]) == 2
    out, err = capfd.readouterr()
    assert out == "Epoch 4/100\n"  # the child's own output passes through
    assert err.splitlines() == ["training goes on", LOST_JOB]


def test_other_ends_keep_their_status(capfd):
    assert supervise([sys.executable, "-c", "import sys; print('bertology: error: bad flag', file=sys.stderr); "
                                            "sys.exit(2)"]) == 2
    assert capfd.readouterr().err == "bertology: error: bad flag\n"
    assert supervise([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]) \
        == 128 + signal.SIGTERM
    assert supervise([sys.executable, "-c", "pass"]) == 0


def test_only_a_jax_pretraining_of_several_processes_is_supervised(monkeypatch):
    monkeypatch.delenv("BERTOLOGY_SUPERVISED", raising=False)
    monkeypatch.delenv("KERAS_DISTRIBUTION_NUM_PROCESSES", raising=False)
    assert needs_supervision("pretrain", "jax", "multiworker")
    assert not needs_supervision("pretrain", "tensorflow", "multiworker")  # tf.distribute reports its own
    assert not needs_supervision("pretrain", "jax", "auto") and not needs_supervision("finetune", "jax", None)
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    assert needs_supervision("pretrain", "jax", "auto")
    monkeypatch.setenv("BERTOLOGY_SUPERVISED", "1")  # the child runs the command itself
    assert not needs_supervision("pretrain", "jax", "multiworker")
