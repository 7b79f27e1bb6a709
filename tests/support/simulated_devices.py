"""XLA_FLAGS for N simulated CPU devices.

A collective waits for every device's thread, and on a loaded 2-core CI machine one of them once went
unscheduled past XLA's 40 s termination timeout, which ends the process (a notebook kernel died in CI):
these tests let it wait up to 10 minutes. And each device computes on one thread: with Eigen's
multi-threaded kernels, the devices' work shares XLA's intra-op thread pool, where a device waiting in a
collective can hold the thread another device's op waits for, and the step never ends (the notebook's JAX
path hung so in CI, 7 of 8 devices arrived; JAX's authors advise this flag for simulated devices).
"""


def xla_flags(count):
    return (f"--xla_force_host_platform_device_count={count} "
            "--xla_cpu_collective_call_terminate_timeout_seconds=600 --xla_cpu_multi_thread_eigen=false")
