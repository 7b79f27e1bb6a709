"""The benchmarks run end to end (--smoke) and write complete reports.

Only the reports' structure is checked: timings on a shared 2-core machine are
far too noisy to assert which system is faster. CI runs the MLM benchmark's
smoke (the harness the others share) and the study's GPU plan; the other
benchmarks' smokes run under `make test-all` (marked extended).
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

SYSTEM_KEYS = {
    "samples_per_sec", "ms_per_step", "peak_mib", "baseline_mib", "cpu_busy", "cpu_ms_per_step",
    "num_params", "num_trainable_variables", "rounds",
}
ROUND_KEYS = {
    "system", "samples_per_sec", "ms_per_step", "median_step_ms", "peak_mib", "baseline_mib",
    "cpu_busy", "cpu_ms_per_step", "timed_steps", "warmup_steps", "warmup_s", "build_s", "timed_s",
    "num_params", "num_trainable_variables", "final_loss", "process_s", "loadavg_start",
    "loadavg_end", "others_cpu_busy", "steal", "contended",
}
ENTRY_KEYS = {
    "shape", "warmup_steps", "steps", "systems", "ratio_vs_keras_hub", "round_ratios",
    "discarded_contended_rounds", "contended_rounds_kept",
}
SHAPE_KEYS = {
    "num_layers", "hidden_size", "num_heads", "intermediate_size", "seq_len", "batch_size",
    "num_predictions", "dtype", "vocab_size",
}
MACHINE_KEYS = {"cpu_count", "tensorflow", "keras", "keras_hub", "date", "python"}


@pytest.mark.slow
def test_smoke_benchmark_writes_complete_report(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_mlm", "--smoke", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "round 1/1" in proc.stdout

    json_path = tmp_path / "mlm_throughput_smoke.json"
    md_path = tmp_path / "mlm_throughput_smoke.md"
    assert json_path.is_file() and md_path.is_file()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "temp files left"
    report = json.loads(json_path.read_text())

    assert report["smoke"] is True
    assert report["settings"]["rounds"] == 1
    assert MACHINE_KEYS <= set(report["machine"])
    assert report["machine"]["cpu_count"] >= 1
    assert report["configs"], "no configuration measured"

    for name, entry in report["configs"].items():
        assert ENTRY_KEYS <= set(entry), name
        assert SHAPE_KEYS <= set(entry["shape"]), name
        systems = entry["systems"]
        assert set(systems) == {"ours", "keras_hub"}
        for system, summary in systems.items():
            assert SYSTEM_KEYS <= set(summary), (name, system)
            for key in ("samples_per_sec", "ms_per_step", "peak_mib"):
                assert summary[key] > 0 and math.isfinite(summary[key]), (name, system, key)
            assert len(summary["rounds"]) == 1
            for measured in summary["rounds"]:
                assert ROUND_KEYS <= set(measured), (name, system)
                assert measured["system"] == system
                assert measured["samples_per_sec"] > 0 and measured["ms_per_step"] > 0
                assert math.isfinite(measured["final_loss"])
                # samples/s and ms/step describe the same timed interval
                expected = entry["shape"]["batch_size"] * 1000.0 / measured["ms_per_step"]
                assert measured["samples_per_sec"] == pytest.approx(expected, rel=1e-6)
        # Same shape on both sides: identical parameter counts.
        assert systems["ours"]["num_params"] == systems["keras_hub"]["num_params"]
        ratio = systems["ours"]["samples_per_sec"] / systems["keras_hub"]["samples_per_sec"]
        assert entry["ratio_vs_keras_hub"] == pytest.approx(ratio, rel=1e-9)
        assert entry["ratio_vs_keras_hub"] > 0

    table = md_path.read_text()
    for name in report["configs"]:
        assert f"| {name} |" in table


@pytest.mark.extended
@pytest.mark.slow
def test_masking_benchmark_smoke_writes_complete_report(tmp_path):
    from benchmarks.bench_masking import HF_PEERS, STAGES

    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_masking", "--smoke", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "masking_throughput_smoke.json").read_text())
    assert (tmp_path / "masking_throughput_smoke.md").is_file()
    assert MACHINE_KEYS <= set(report["machine"]) and report["smoke"] is True
    (entry,) = report["shapes"].values()
    assert set(entry["rows_per_sec"]) == set(STAGES)
    for name, value in entry["rows_per_sec"].items():
        assert value > 0 and math.isfinite(value)
        assert entry["ratio_vs_keras_hub"][name] == pytest.approx(value / entry["rows_per_sec"]["keras_hub_tokens"])
        assert entry["ratio_vs_bert_tokens"][name] == pytest.approx(value / entry["rows_per_sec"]["bert_tokens"])
    assert entry["ratio_vs_transformers"] == pytest.approx(
        {name: entry["rows_per_sec"][name] / entry["rows_per_sec"][peer] for name, peer in HF_PEERS.items()})
    consumed = report["consumer"]["tokens_per_sec"]  # our BERT pretrainer's training rate, measured here
    assert consumed > 0 and entry["ratio_vs_consumption"] == pytest.approx(
        {name: rows * entry["seq_len"] / consumed for name, rows in entry["rows_per_sec"].items()})


@pytest.mark.extended
@pytest.mark.slow
def test_xlnet_benchmark_smoke_writes_complete_report(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_xlnet", "--smoke", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "xlnet_step_time_smoke.json").read_text())
    assert MACHINE_KEYS <= set(report["machine"]) and report["smoke"] is True
    (entry,) = report["results"].values()
    bert, xlnet = entry["ms_per_step"]["bert_mlm"], entry["ms_per_step"]["xlnet_plm"]
    assert bert > 0 and xlnet > 0 and entry["ratio_xlnet_vs_bert"] == pytest.approx(xlnet / bert)
    assert entry["params"]["bert_mlm"] > 0 and entry["params"]["xlnet_plm"] > 0
    assert "| tiny_seq32_batch4 |" in (tmp_path / "xlnet_step_time_smoke.md").read_text()


@pytest.mark.extended
@pytest.mark.slow
def test_peer_suite_smoke_trains_the_same_architecture_in_every_system(tmp_path):
    """The peer suite's smoke shape: each system trains, and ours and transformers' model hold exactly the
    same parameters (the same architecture, so the ratio compares like with like). ELECTRA: the one whose
    peer must share embeddings and tie the generator's output to them as ours does."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.peer_suite", "--smoke", "--out", str(tmp_path),
                           "--models", "electra", "--systems", "ours", "torch_eager"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peers_smoke.json", "peers_smoke.md", "peers_smoke.png"]
    report = json.loads((tmp_path / "peers_smoke.json").read_text())
    assert report["machine"]["cpu_model"] is not None and report["rooflines"]["float32"] > 0
    extensions = report["machine"]["vector_extensions"]  # what decides the CPU kernels, named in the table
    assert set(extensions) <= {"AVX2", "AVX-512", "AVX-512-VNNI", "AVX-512-BF16", "AMX-BF16"}
    assert ", ".join(extensions or ["no AVX2"]) in (tmp_path / "peers_smoke.md").read_text()
    by_model = {entry["model"]: entry for entry in report["entries"]}
    assert sorted(by_model) == ["electra"]  # the model whose two encoders share one set of embeddings
    assert set(by_model["electra"]["systems"]) == {"ours", "torch_eager"}
    for name, entry in by_model.items():
        systems = entry["systems"]
        assert systems["ours"]["num_params"] == systems["torch_eager"]["num_params"], name
        for system, summary in systems.items():
            assert summary["samples_per_sec"] > 0 and math.isfinite(summary["rounds"][0]["final_loss"]), system
            assert 0 < summary["mfu"] < 1, (name, system)
            # what training added beyond the built model and arrays: some, and less than the process's peak
            assert 0 < summary["training_mib"] < summary["peak_mib"], (name, system)
        assert entry["ratios"] == pytest.approx(
            {peer: systems["ours"]["samples_per_sec"] / systems[peer]["samples_per_sec"]
             for peer in systems if peer != "ours"})
    markdown = (tmp_path / "peers_smoke.md").read_text()
    assert all(f"| {name} (" in markdown for name in by_model)


@pytest.mark.extended
@pytest.mark.slow
def test_serving_benchmark_smoke_times_every_system_on_every_row(tmp_path):
    """Every system has a number on every row, the ratios come from them (peer ms / ours ms at batch 1,
    ours seq/s / peer seq/s at batch 32) for the plain and the XLA export, and the report names the processor
    and our padded length."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_serving", "--smoke", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serving.json", "serving.md", "serving.png"]
    report = json.loads((tmp_path / "serving.json").read_text())
    assert report["smoke"] is True and report["machine"]["cpu_model"] and "processor" in report["machine"]
    assert report["machine"]["usable_cpus"] >= 1 and report["machine"]["versions"]["onnxruntime"]
    assert ", ".join(report["machine"]["vector_extensions"] or ["no AVX2"]) in (tmp_path / "serving.md").read_text()
    (entry,) = report["models"]
    assert entry["same_ids_share"] == {"short": 1.0}  # both sides tokenize the texts alike
    assert [(row["length"], row["batch"]) for row in entry["rows"]] == [("short", 1), ("short", 32)]
    for row in entry["rows"]:
        systems = row["systems"]
        assert set(systems) == {"ours", "ours_xla", "ours_onnx", "torch_eager", "onnxruntime"}
        key = "p50_ms" if row["batch"] == 1 else "seqs_per_sec"
        for name, values in systems.items():
            assert values[key] > 0 and math.isfinite(values[key]), (row["length"], row["batch"], name)
            assert values["seq_axis"] and all(axis >= 3 for axis in values["seq_axis"]), name
        for peer in ("torch_eager", "onnxruntime"):
            expected = {ours: systems[peer]["p50_ms"] / systems[ours]["p50_ms"] if row["batch"] == 1
                        else systems[ours]["seqs_per_sec"] / systems[peer]["seqs_per_sec"]
                        for ours in ("ours", "ours_xla", "ours_onnx")}
            assert row["ratios"][peer] == pytest.approx(expected), peer
        # Each export is held to its own goals: the ONNX export's at batch 1 on short texts are 1.5x eager and
        # 1.0x the twin's ONNX export.
        if row["batch"] == 1:
            assert row["goals"]["torch_eager"] == {"SavedModel": 1.0, "ONNX": 1.5}
            assert row["goals"]["onnxruntime"] == {"SavedModel": None, "ONNX": 1.0}
    assert "## bert-tiny" in (tmp_path / "serving.md").read_text()


@pytest.mark.extended
@pytest.mark.slow
def test_serving_kernel_profile_smoke_times_every_kernel_on_each_side(tmp_path):
    """Each kernel has a TensorFlow, XLA and PyTorch time (the empty graph call no PyTorch one), and the
    ratio column comes from them."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.profile_serving", "--smoke", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serving_kernels.json", "serving_kernels.md"]
    report = json.loads((tmp_path / "serving_kernels.json").read_text())
    rows = {row["kernel"]: row for row in report["rows"]}
    assert list(rows) == ["dense 768->3072", "layer norm", "GELU", "masked softmax", "call of an empty graph"]
    for name, row in rows.items():
        for system in ("TensorFlow graph", "XLA") + (("PyTorch eager",) if name != "call of an empty graph" else ()):
            assert row[system] > 0 and math.isfinite(row[system]), (name, system)
        if row["PyTorch eager"] is not None:
            assert row["TensorFlow / PyTorch"] == pytest.approx(row["TensorFlow graph"] / row["PyTorch eager"])
    operations = report["bert_mini_graph_operations"]
    assert operations["MatMul"] + operations.get("BatchMatMulV2", 0) >= 4 * 6  # six projections per layer
    assert "| 16 | layer norm |" in (tmp_path / "serving_kernels.md").read_text()


@pytest.mark.extended
@pytest.mark.slow
def test_transformer_xl_benchmark_smoke_writes_complete_report(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_transformer_xl", "--smoke", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "transformer_xl_step_time_smoke.json").read_text())
    assert MACHINE_KEYS <= set(report["machine"]) and report["smoke"] is True
    (entry,) = report["results"].values()
    gpt, txl = entry["ms_per_step"]["gpt"], entry["ms_per_step"]["transformer_xl"]
    assert gpt > 0 and txl > 0 and entry["ratio_transformer_xl_vs_gpt"] == pytest.approx(txl / gpt)
    assert entry["shape"]["mem_len"] == entry["shape"]["seq_len"] == 32


def test_study_gpu_benchmark_plans_as_the_study_and_projects_each_arms_steps(tmp_path):
    """Planned here at the smoke scale, timed in this process (on the GPU it runs on JAX): the plan's steps
    and stages are the study's own (ArmRun at equal FLOPs), the saved batch trains the arm, and the report
    projects steps x time per step."""
    from benchmarks import bench_study_gpu
    from keras_bertology.study.arms import ARMS, SCALES
    from keras_bertology.study.run import ArmRun

    plan = bench_study_gpu.prepare("smoke", ["electra-two-stage"], tmp_path / "plan", vocab_size=1000,
                                  tasks=["bbc-news"])
    arm = plan["arms"]["electra-two-stage"]
    assert plan["budget_flops"] == SCALES["smoke"].reference_steps * arm["flops_per_step"]
    cost = {"average": arm["flops_per_step"], "stages": [[1.0, arm["flops_per_step"]]]}
    steps = ArmRun(ARMS[7], plan["budget_flops"], cost, SCALES["smoke"]).steps
    assert arm["steps"] == steps and arm["family_options"] == {"two_stage_steps": max(1, round(steps / 2))}
    times = bench_study_gpu.time_arms(tmp_path / "plan", tmp_path / "times", "float32", warmup=1, steps=2)
    timing = times["arms"]["electra-two-stage"]
    assert timing["ms_per_step"] > 0 and math.isfinite(timing["final_loss"])
    assert timing["projected_seconds"] == pytest.approx(arm["steps"] * timing["ms_per_step"] / 1000)
    bench_study_gpu.report(tmp_path / "times" / bench_study_gpu.TIMES, tmp_path / "results")
    table = (tmp_path / "results" / "study_smoke_gpu.md").read_text()
    assert f"| electra-two-stage | {arm['steps']:,} |" in table
    assert json.loads((tmp_path / "results" / "study_smoke_gpu.json").read_text())[
        "projected_pretraining_seconds"] == pytest.approx(timing["projected_seconds"])


@pytest.mark.extended
@pytest.mark.slow
def test_t5_generation_benchmark_smoke_times_both_systems_on_the_same_tokens(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_generate", "--layers", "1", "--hidden", "32",
                           "--heads", "2", "--ff", "64", "--batches", "1", "2", "--new-tokens", "4", "--rounds", "1",
                           "--out", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "generate_t5.json").read_text())
    assert MACHINE_KEYS <= set(report["machine"]) and [row["batch"] for row in report["rows"]] == [1, 2]
    for row in report["rows"]:
        assert 1 <= row["tokens"] <= 4 * row["batch"] and row["ours_tokens_per_s"] > 0
        assert row["ratio"] == pytest.approx(row["ours_tokens_per_s"] / row["transformers_tokens_per_s"])
    assert "| 2 |" in (tmp_path / "generate_t5.md").read_text()


@pytest.mark.extended
@pytest.mark.slow
def test_packing_benchmark_smoke_measures_both_packings_on_both_corpora(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_packing", "--smoke", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "packing_unpadded_smoke.json").read_text())
    assert MACHINE_KEYS <= set(report["machine"])
    rows = {(row["corpus"], row["packing"]): row for row in report["rows"]}
    assert set(rows) == {(corpus, packing) for corpus in ("plays", "bbc-news") for packing in ("doc-sentences",
                                                                                             "unpadded")}
    for corpus in ("plays", "bbc-news"):
        padded, unpadded = rows[(corpus, "doc-sentences")], rows[(corpus, "unpadded")]
        assert unpadded["real_token_share"] >= padded["real_token_share"] and unpadded["samples_per_second"] > 0
    assert rows[("bbc-news", "unpadded")]["instances"] < rows[("bbc-news", "doc-sentences")]["instances"]


@pytest.mark.extended
def test_the_int8_benchmark_scores_onnx_as_the_keras_model_scored_it(tmp_path):
    """`benchmarks/onnx_int8_accuracy.py` on a user folder: the float ONNX model, scored through the task kind's
    own predict and score, gives the Keras model's test score (the adapter feeds and reads it right), and the
    int8 row is the quantized file's."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "support"))
    from family_harness import native_run, sentences_of_one_play
    from finetune_material import user_folders

    from benchmarks import onnx_int8_accuracy as bench
    from keras_bertology.models.registry import get_family

    run = tmp_path / "run"
    native_run(get_family("bert"), run, sentences_of_one_play())
    task = user_folders(tmp_path / "data")["pairs"]
    # 32 positions, beyond the run's 16: every pair ends in padding, which the adapter must mask.
    args = bench.build_parser().parse_args(["--epochs", "2", "--rounds", "1", "--seq-len", "32"])
    row = bench.measure_task(str(task), run, tmp_path, args)
    assert row["float32"] == row["keras_test"] and row["metric"] == "macro_f1"
    # The adapter's logits are the Keras model's on the same encoded examples (every input fed by its name).
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.finetune.tasks import TASK_KINDS
    from keras_bertology.keras_archives import load_keras_archive
    from keras_bertology.runs import load_run_model

    onnx_model = bench.OnnxTaskModel(tmp_path / "onnx-pairs" / "model.onnx")
    tuned, loaded_task, encoder = load_keras_archive(tmp_path / "ft-pairs" / "model.keras"), load_task(str(task)), \
        load_run_model(run)
    examples = loaded_task.splits["test"]
    inputs = TASK_KINDS[loaded_task.kind].encode(loaded_task, examples, get_family("bert"), encoder.tokenizer, 32,
                                                 onnx_model.inputs)["inputs"]
    assert (inputs["padding_mask"] == 0).any(axis=1).all()
    np.testing.assert_allclose(onnx_model.predict(inputs, batch_size=7), tuned.predict(inputs, verbose=0), atol=1e-4)
    assert row["difference"] == row["int8"] - row["float32"] and 0 < row["quantized_max_difference"] < 0.5
    assert set(row["ms"]) == {"float32", "int8"} and all(set(ms) == set(bench.BATCHES) for ms in row["ms"].values())


@pytest.mark.extended
@pytest.mark.slow
def test_loss_chunks_benchmark_finds_the_chunked_step_holding_less(tmp_path):
    """XLA's memory plan is deterministic: at the tiny shape (256 positions x 50,257 tokens, a 2-layer encoder of
    64) the step whose loss takes 8 positions at a time holds less than the float32 logits of every position
    alone (measured 29 MiB against 49; over every logit 150 MiB; without the recomputation, 78)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_loss_chunks", "--shapes", "tiny", "--chunks", "8",
                           "--precisions", "float32", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loss_chunks.json", "loss_chunks.md"]
    (entry,) = json.loads((tmp_path / "loss_chunks.json").read_text())["entries"]
    rows = {row["chunk_size"]: row for row in entry["rows"]}
    assert sorted(rows) == [0, 8] and rows[0]["positions"] == 256 and rows[0]["vocabulary"] == 50257
    logits_mib = 256 * 50257 * 4 / 2 ** 20
    assert 0 < rows[8]["temp_mib"] < logits_mib < rows[0]["temp_mib"]
    assert "| all |" in (tmp_path / "loss_chunks.md").read_text()


def test_the_gpu_profile_counts_each_kernel_once_from_the_device_streams():
    """A JAX trace shows a GPU's kernels on its streams and again, summed, on XLA's derived lines: only the
    streams count; host events are left out when a device ran; each kernel gets its kind."""
    from benchmarks.gpu_profile import perfetto_events, summarize

    def meta(pid, name, tid=None):
        return {"ph": "M", "pid": pid, "name": "thread_name" if tid is not None else "process_name",
                **({"tid": tid} if tid is not None else {}), "args": {"name": name}}

    def kernel(pid, tid, name, dur, op=""):
        return {"ph": "X", "pid": pid, "tid": tid, "name": name, "dur": dur, "args": {"hlo_op": op}}

    trace = {"traceEvents": [
        meta(1, "/host:CPU"), meta(2, "/device:GPU:0"), meta(2, "Stream #13(Compute)", 7), meta(2, "XLA Ops", 8),
        kernel(1, 3, "PjitFunction(train_step)", 900.0),
        kernel(2, 7, "sm90_xmma_gemm_bf16bf16_bf16f32", 300.0, "dot.4"),
        kernel(2, 7, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 200.0, "custom-call.2"),
        kernel(2, 7, "loop_add_fusion", 50.0, "fusion.9"), kernel(2, 7, "input_reduce_fusion", 25.0, "fusion.3"),
        kernel(2, 8, "dot.4", 300.0), kernel(2, 8, "custom-call.2", 200.0),
    ]}
    events, on_device = perfetto_events(trace)
    assert on_device and sorted(name for name, _, _ in events) == [
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "input_reduce_fusion", "loop_add_fusion",
        "sm90_xmma_gemm_bf16bf16_bf16f32"]
    summary = summarize(events, steps=5, device="device")
    assert summary["ms_per_step"] == pytest.approx(575.0 / 1000 / 5)
    assert {kind: round(value["ms_per_step"] * 5000) for kind, value in summary["kinds"].items()} == {
        "matmul": 300, "attention": 200, "element-wise": 50, "softmax/reduce": 25}
    assert [item["name"] for item in summary["top"]][0] == "sm90_xmma_gemm_bf16bf16_bf16f32"
    # Without a device (XLA:CPU): the host's events, less the Python tracer's nested frames.
    host = {"traceEvents": [meta(1, "/host:CPU"), kernel(1, 3, "$threading.py:1 run", 90.0),
                            kernel(1, 3, "transpose_copy_fusion", 10.0)]}
    assert perfetto_events(host) == ([("transpose_copy_fusion", "", 10.0)], False)


@pytest.mark.extended
def test_the_gpu_profile_runs_ours_and_transformers_and_compares_them(tmp_path):
    """On a CPU a smoke run: ours on JAX and transformers eager, each in its process, then the side-by-side
    table (benchmarks/gpu_peers.sh profile runs the same commands on a GPU)."""
    import os

    common = ["--model", "bert", "--shape", "tiny", "--steps", "2", "--out", str(tmp_path)]
    for system, backend in (("ours", "jax"), ("torch_eager", "tensorflow")):
        done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_profile", "--system", system, *common],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, KERAS_BACKEND=backend))
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads((tmp_path / f"gpu_profile_{system}.json").read_text())
        assert report["ms_per_step"] > 0 and report["top"] and report["device"] == "host"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_profile", "--compare", "--out", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "gpu_profile.md").read_text()
    assert "| kind | ours | torch_eager |" in table and "## ours: top kernels" in table


def test_the_instance_benchmark_times_each_builder_on_the_instances_it_builds(tmp_path, capsys):
    """In this process (the builders are NumPy): the report counts what the builders give for its corpus."""
    from benchmarks import bench_instances
    from keras_bertology.data.instances import build_nsp_instances

    assert bench_instances.main(["--smoke", "--seq-len", "64", "--out", str(tmp_path), "--name", "b"]) == 0
    report = json.loads((tmp_path / "b.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "b.md"]
    documents = bench_instances.synthetic_corpus(50)
    assert report["tokens"] == sum(map(len, sum(documents, []))) and report["rounds"] == 1
    nsp = build_nsp_instances(documents, 64, bench_instances.CLS, bench_instances.SEP, bench_instances.PAD,
                              np.random.default_rng(8))
    assert report["builders"]["nsp_pairs"]["instances"] == len(nsp["token_ids"]) > 0
    assert set(report["builders"]) == set(bench_instances.BUILDERS)
    for row in report["builders"].values():
        assert len(row["cpu_s"]) == 1 and row["tokens_per_cpu_s"] > 0 and row["instances"] > 0
    assert "| nsp_pairs |" in (tmp_path / "b.md").read_text() and MACHINE_KEYS <= set(report["machine"])
    with pytest.raises(SystemExit) as stopped:
        bench_instances.main(["--seq-len", "4097", "--out", str(tmp_path / "bad")])
    assert stopped.value.code == 2 and not (tmp_path / "bad").exists()
    assert "argument --seq-len: '4097' is not a whole number from 8 to 4096" in capsys.readouterr().err


@pytest.mark.parametrize("argv, reason", [
    (["--steps", "0"], "argument --steps: '0' is not a whole number from 1 to 1000"),
    (["--warmup-steps", "1001"], "argument --warmup-steps: '1001' is not a whole number from 1 to 1000"),
    (["--top", "0"], "argument --top: '0' is not a whole number from 1 to 1000"),
    (["--peer", "bart"], "argument --peer: invalid choice: 'bart'"),
    (["--peer", "bert", "--shape", "huge"], "argument --shape: invalid choice: 'huge'"),
    (["--peer-system", "keras_hub"], "--peer-system keras_hub needs --peer"),
    (["--peer", "bert", "--peer-system", "keras_hub", "--jit-compile"], "--peer-system keras_hub needs --peer"),
])
def test_the_op_profile_refuses_bad_flags_in_one_line(monkeypatch, capsys, argv, reason):
    from benchmarks import profile_mlm

    monkeypatch.setattr(sys, "argv", ["profile_mlm.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        profile_mlm.main()
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert reason in err.strip().splitlines()[-1] and "Traceback" not in err
