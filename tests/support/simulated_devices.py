"""XLA_FLAGS of the suite, and of N simulated CPU devices.

XLA's LLVM back end runs at -O0 in the suite (conftest.py sets it for every process the tests start): each
test compiles its tiny programs once or twice, so compiling is most of their time, and the optimised machine
code never wins that back. The flag changes how fast the code runs, not what it computes (no fast-math;
every parity bound and bit-for-bit comparison holds with it). Measured on a 2-core AMD EPYC, three JAX tests
(the chunked loss, T5's one-position decoding, Transformer-XL's memory), alternating: 88.7 and 98.1 s
without, 72.3 and 74.3 s with.

A collective waits for every device's thread, and on a loaded 2-core CI machine one of them once went
unscheduled past XLA's 40 s termination timeout, which ends the process (a notebook kernel died in CI):
these tests let it wait up to 10 minutes. And each device computes on one thread: with Eigen's
multi-threaded kernels, the devices' work shares XLA's intra-op thread pool, where a device waiting in a
collective can hold the thread another device's op waits for, and the step never ends (the notebook's JAX
path hung so in CI, 7 of 8 devices arrived; JAX's authors advise this flag for simulated devices).
"""


FAST_COMPILE = "--xla_backend_optimization_level=0"


def xla_flags(count):
    return (f"{FAST_COMPILE} --xla_force_host_platform_device_count={count} "
            "--xla_cpu_collective_call_terminate_timeout_seconds=600 --xla_cpu_multi_thread_eigen=false")
