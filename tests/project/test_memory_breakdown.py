"""benchmarks/memory_breakdown.py: TensorFlow's count of the tensors' memory, and the split of a row's peak."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forked_python import run_python

from benchmarks.memory_breakdown import render_markdown, split, summarize

REPO_ROOT = Path(__file__).resolve().parents[2]

# Frees a tensor of 128 MiB, then allocates 64 MiB of float32 in one tensor, frees it, and prints what the
# count said before it, with it, and after it.
_ALLOCATE = """
import json
import keras
import tensorflow as tf
from benchmarks.peer_timing import tensor_allocator_mib

earlier = tf.fill([32, 2 ** 20], 1.0)  # a peak before the count starts again
del earlier
before = tensor_allocator_mib(reset_peak=True)
held = tf.fill([16, 2 ** 20], 1.0)
holding = tensor_allocator_mib()
del held
print(json.dumps({"before": before, "holding": holding, "after": tensor_allocator_mib()}))
"""


def _count_in_a_new_process(counted, backend="tensorflow"):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": backend}
    env["TF_ENABLE_ONEDNN_OPTS"] = "1" if counted else "0"  # oneDNN's pooled allocator counts; the default does not
    proc = run_python([sys.executable, "-c", _ALLOCATE], env=env, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_tensor_count_sees_a_tensor_of_known_size_come_and_go():
    counts = _count_in_a_new_process(counted=True)
    (in_use, _), (holding, peak), (after, after_peak) = counts["before"], counts["holding"], counts["after"]
    assert holding - in_use == pytest.approx(64, abs=0.5)  # the tensor, and nothing else of that size
    assert peak == pytest.approx(holding, abs=0.5) and after_peak == peak  # the peak keeps it once freed
    assert after == pytest.approx(in_use, abs=0.5)


def test_without_onednns_allocator_or_with_keras_on_jax_there_is_no_count():
    assert _count_in_a_new_process(counted=False) == {"before": None, "holding": None, "after": None}
    # TensorFlow loaded beside Keras on JAX: its count would miss what trains
    assert _count_in_a_new_process(counted=True, backend="jax") == {"before": None, "holding": None, "after": None}


def _row(ours_peak, ours_before, tensors, eager_peak, eager_before):
    ours = summarize([{"peak_mib": ours_peak, "resident_before_mib": ours_before,
                       **({} if tensors is None else {"tensors_peak_mib": tensors})}])
    eager = summarize([{"peak_mib": eager_peak, "resident_before_mib": eager_before}])
    return {"model": "albert", "precision": "float32", "shape": "base", "ours": "ours", "jit_compile": False,
            "systems": {"ours": ours, "torch_eager": eager}}


def test_rounds_give_medians_and_training_takes_the_median_of_each_rounds_own():
    rounds = [{"peak_mib": 100, "resident_before_mib": 10, "tensors_peak_mib": 5},
              {"peak_mib": 200, "resident_before_mib": 150, "tensors_peak_mib": 7},
              {"peak_mib": 300, "resident_before_mib": 20}]
    # 90, 50 and 280 of their own: 90, not the medians' 200 - 20; no tensor count unless every round has one
    assert summarize(rounds) == {"peak_mib": 200, "resident_before_mib": 20, "training_mib": 90}
    row = _row(2300, 900, None, 1400, 400)
    row["systems"]["ours"] = summarize(rounds)
    assert split(row)["own"]["ours"] == 90  # what the table's training column shows


def test_a_rows_peak_splits_into_the_process_before_training_its_tensors_and_the_rest():
    parts = split(_row(ours_peak=2300, ours_before=900, tensors=1000, eager_peak=1400, eager_before=400))
    assert parts["ratio"] == pytest.approx(2300 / 1400)
    assert parts["before_extra"] == 500  # ours' runtime beyond torch's, the same weights and arrays
    assert parts["own"] == {"ours": 1400, "eager": 1000}
    assert parts["beyond_tensors"] == 400
    assert parts["ratio_without_runtime_extra"] == pytest.approx(1800 / 1400)
    uncounted = split(_row(2300, 900, None, 1400, 400))
    assert uncounted["tensors"] is None and uncounted["beyond_tensors"] is None


def test_the_table_shows_each_part_of_each_row():
    report = {"name": "mine", "rounds": 1, "rows": [_row(2300, 900, 1000, 1400, 400)],
              "machine": {"usable_cpus": 2, "cpu_model": "a CPU", "vector_extensions": ["AVX2"],
                          "tensorflow": "2", "keras": "3", "torch": "2", "transformers": "5", "date": "today"}}
    row = render_markdown(report).splitlines()[-1]
    assert row.split(" | ")[3:] == ["no XLA", "2300 / 1400", "1.64", "900 / 400 (+500)", "1400 / 1000", "1000", "400",
                                    "1.29 |"]


@pytest.mark.extended
@pytest.mark.slow
def test_the_breakdown_runs_both_systems_and_counts_ours_tensors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.memory_breakdown", "--models", "bert", "--shape",
                           "tiny", "--precisions", "float32", "--ours", "ours_no_xla", "ours_xla", "--out",
                           str(tmp_path), "--name", "tiny"],
                          env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"},  # the tests' default is off: no count
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.json", "tiny.md"]
    rows = json.loads((tmp_path / "tiny.json").read_text())["rows"]
    assert [(row["ours"], row["jit_compile"]) for row in rows] == [("ours_no_xla", False), ("ours_xla", True)]
    assert rows[0]["systems"]["torch_eager"] == rows[1]["systems"]["torch_eager"]  # one peer for both rows
    for row in rows:
        ours, eager = row["systems"]["ours"], row["systems"]["torch_eager"]
        assert "tensors_peak_mib" not in eager  # torch's allocator keeps no count
        assert 0 < ours["tensors_peak_mib"] < ours["peak_mib"] - ours["resident_before_mib"]
        assert eager["resident_before_mib"] < eager["peak_mib"]
