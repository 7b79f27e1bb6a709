"""A study's independent runs in worker processes, each on its share of the CPU cores.

A tiny encoder keeps two cores only partly busy: on 2 cores, one thread
trains a 2-layer, 128-wide encoder at about 80% of the speed of two, so two
runs side by side, a core each, finish about 1.6 times sooner than one after
the other. Every run seeds itself, so which process runs it does not change
what it computes (beyond the last bits of float sums over other thread
counts). Results come back to the calling process, which alone writes the
study's state.
"""

import concurrent.futures
import logging
import multiprocessing
import os

# Read by TensorFlow when its runtime starts, so a worker sets them before its first operation.
_THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


class Workers:
    """`count` worker processes, started at the first runs and kept for the next (a worker starts
    TensorFlow once); with a count of 1 the runs go in this process, unless `backend` names the Keras
    backend the workers run on (this process keeps its own). A context manager."""

    def __init__(self, count, backend=None):
        self.count, self.backend = count, backend
        self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if self._pool is not None:
            if kind is not None:  # a failed run, Ctrl-C or SIGTERM: the runs in flight stop now, not at their end
                for process in list((self._pool._processes or {}).values()):  # (each run resumes or restarts)
                    process.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)

    def run_all(self, function, jobs, on_done):
        """`function(*job)` for every job, `on_done(job, result)` here as each ends (in order with one
        worker, as they finish with several). A job that raises cancels the rest and raises here."""
        if not jobs:  # a resumed study with nothing left to run starts no process
            return
        if self.count == 1 and self.backend is None:
            for job in jobs:
                on_done(job, function(*job))
            return
        if self._pool is None:
            threads = max(1, (os.cpu_count() or self.count) // self.count)
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.count, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                initargs=(threads, self.backend))
        pending = {self._pool.submit(function, *job): job for job in jobs}
        try:
            for future in concurrent.futures.as_completed(pending):
                on_done(pending[future], future.result())
        finally:
            for future in pending:
                future.cancel()


def _start_worker(threads, backend):
    for name in _THREAD_VARIABLES:
        os.environ[name] = str(threads)
    if backend is not None:  # read when Keras is first imported, by the worker's first run
        os.environ["KERAS_BACKEND"] = backend
    # As in the study's own process: dozens of models built in one process, each traced again.
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
