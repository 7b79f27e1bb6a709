"""XLA_FLAGS for N simulated CPU devices. A collective waits for every device's thread, and on a loaded
2-core CI machine one of them once went unscheduled past XLA's 40 s termination timeout, which ends the
process (a notebook kernel died in CI): these tests let it wait up to 10 minutes."""


def xla_flags(count):
    return (f"--xla_force_host_platform_device_count={count} "
            "--xla_cpu_collective_call_terminate_timeout_seconds=600")
