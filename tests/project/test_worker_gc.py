"""tests/conftest.py's collection settings are in force where the tests run: full collections skip what the
worker imported, and start less often (they took 7-8% of a worker's time, docs/numerics-and-tests.md)."""

import gc
import sys

PYTHON_FIRST_THRESHOLD = 700  # CPython's default


def test_the_worker_froze_what_it_imported_and_collects_less_often():
    conftest = sys.modules["conftest"]
    assert gc.get_freeze_count() > 100_000, "TensorFlow alone brings more objects than this"
    assert gc.get_threshold()[0] == conftest.GC_FIRST_THRESHOLD > PYTHON_FIRST_THRESHOLD
