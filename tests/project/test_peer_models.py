"""The peer suite compares like with like: each peer holds our model's parameters, on valid batches.

The suite's ratios mean something only if transformers' model is the same
architecture as ours (counted here parameter for parameter) and every
system's batches are valid pretraining rows of that model's objective.
"""

import numpy as np
import pytest

from benchmarks.peer_models import MODELS, SHAPES, SPAN_LENGTH, our_config, synthetic_features

TINY = SHAPES["tiny"]
# transformers' RoBERTa has two more position rows (its positions start after the padding id) and a
# one-row token-type table; ours has neither.
# torch's LSTMs have a second bias (4 x cells), one per direction and layer; our ELMo has the scalar mix's
# layers + 1 weights and its scale.
EXTRA_IN_TRANSFORMERS = {"roberta": 3 * TINY.hidden_size,
                         "elmo": 2 * TINY.num_layers * 4 * TINY.intermediate_size - (TINY.num_layers + 2)}


# A row that only changes dropout holds its model's parameters: the dropout test below covers it.
@pytest.mark.parametrize("name", sorted(name for name, model in MODELS.items() if not model.config))
def test_transformers_peer_holds_our_parameters(name):
    pytest.importorskip("torch")
    from benchmarks.peer_keras import build_ours
    from benchmarks.peer_torch import build_torch

    ours, _ = build_ours(MODELS[name], TINY, "float32")
    _, torch_params = build_torch(MODELS[name], TINY, "float32", compiled=False)
    assert torch_params - ours.count_params() == EXTRA_IN_TRANSFORMERS.get(name, 0)


def _rows(name, shape=SHAPES["small"]):
    config = our_config(MODELS[name], shape)
    return synthetic_features(MODELS[name], shape, config["vocab_size"]), shape


def test_span_rows_mask_whole_spans_between_unmasked_boundaries():
    features, shape = _rows("spanbert")
    positions, left, right = features["mask_positions"], features["span_left"], features["span_right"]
    offset = features["span_offset"]
    assert positions.shape == (4 * shape.batch_size, shape.predictions)
    assert np.all(positions == left + 1 + offset) and np.all(right - left == SPAN_LENGTH + 1)
    assert np.all(left >= 0) and np.all(right < shape.seq_len)
    for row, lefts, rights in zip(positions, left, right):
        assert len(set(row)) == len(row)  # no position predicted twice
        assert not set(lefts) & set(row) and not set(rights) & set(row)  # boundaries stay visible


def test_permutation_rows_follow_one_factorization_order():
    features, shape = _rows("xlnet")
    perm_mask, mapping = features["perm_mask"], features["target_mapping"]
    targets = mapping.sum(axis=1) > 0  # [rows, L]
    assert np.all(mapping.sum(axis=2) == 1) and np.all(targets.sum(axis=1) == shape.predictions)
    assert np.all(features["target_ids"] == np.einsum("rpl,rl->rp", mapping, features["token_ids"]))
    # Only targets are hidden, each from itself, and exactly one target sees all the others.
    assert np.all(perm_mask.max(axis=1) == targets)
    assert np.all(np.diagonal(perm_mask, axis1=1, axis2=2) == targets)
    hidden_targets = np.where(targets[:, :, None], perm_mask, 0).sum(axis=2)
    for row, is_target in zip(hidden_targets, targets):
        # The k-th target of the order is hidden from itself and from those after it: P, P-1, ..., 1.
        assert sorted(row[is_target]) == list(range(1, shape.predictions + 1))



def test_elmos_flop_formula_is_what_its_traced_step_counts():
    """The report's ELMo FLOPs (convolutions, highways, LSTM products, the softmax twice, x 3) against the
    library's count of the traced training step's matmuls, convolutions and loop bodies."""
    from benchmarks.peer_keras import build_ours
    from benchmarks.peer_models import train_flops
    from keras_bertology.pretraining.flops import pretraining_flops

    model = MODELS["elmo"]
    pretrainer, _ = build_ours(model, TINY, "float32", xla="off")
    features, _ = _rows("elmo", TINY)
    batch = pretrainer.split_features({name: value[:TINY.batch_size] for name, value in features.items()})
    assert pretraining_flops(pretrainer, batch, 1)[0] == train_flops(model, TINY)


def test_a_row_without_attention_dropout_trains_without_it_in_every_system():
    pytest.importorskip("torch")
    from benchmarks.peer_keras import build_ours
    from benchmarks.peer_torch import BUILDERS

    for name, expected in (("bert", 0.1), ("bert-no-attention-dropout", 0.0)):
        ours, _ = build_ours(MODELS[name], TINY, "float32")
        torch_model, _ = BUILDERS["bert"](our_config(MODELS[name], TINY), TINY)
        assert ours.backbone.get_config()["attention_dropout"] == expected
        assert torch_model.config.attention_probs_dropout_prob == expected


def test_a_report_names_the_settings_that_held_the_kernels_below_the_processor():
    """A run with oneDNN, PyTorch and XLA held to AVX2 (an AVX2-only processor's kernels, measured on one with
    AVX-512) says so beside the processor's own extensions; a run without says nothing more."""
    from benchmarks.bench_mlm import describe_processor, isa_caps

    machine = {"usable_cpus": 2, "cpu_model": "AMD EPYC", "vector_extensions": ["AVX2", "AVX-512"]}
    held = isa_caps({"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                     "XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_cpu_max_isa=AVX2"})
    assert held == {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "xla_cpu_max_isa": "AVX2"}
    assert describe_processor({**machine, "isa_caps": held}) == (
        "2 usable CPUs (AMD EPYC; AVX2, AVX-512; kernels held by ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2, "
        "xla_cpu_max_isa=AVX2)")
    assert isa_caps({"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}) == {}
    assert describe_processor({**machine, "isa_caps": {}}) == "2 usable CPUs (AMD EPYC; AVX2, AVX-512)"
    assert describe_processor({**machine, "vector_extensions": []}) == "2 usable CPUs (AMD EPYC; no AVX2)"
    unrecorded = {name: value for name, value in machine.items() if name != "vector_extensions"}
    assert describe_processor(unrecorded) == "2 usable CPUs (AMD EPYC)"  # a report from before they were recorded


def _report(entries):
    machine = {"usable_cpus": 2, "cpu_model": "AMD EPYC", "date": "2026-12-06", "gpu": None,
               **dict.fromkeys(("tensorflow", "keras", "keras_hub", "torch", "transformers"), "1")}
    return {"benchmark": "peers", "name": "peers_test", "rounds": 1, "rooflines": {"float32": 2e11},
            "backend": "tensorflow", "machine": machine, "entries": entries}


def _entry(model, hub_ratio):
    from benchmarks.peer_models import train_flops

    rate = {"samples_per_sec": 10.0, "memory_mib": 100.0, "mfu": 0.5, "training_mib": 60.0}
    return {"model": model, "objectives": MODELS[model].objectives, "shape": "small", "shape_text": "small",
            "precision": "float32", "train_flops_per_step": train_flops(MODELS[model], SHAPES["small"]),
            "systems": {"ours": rate, "keras_hub": rate}, "ratios": {"keras_hub": hub_ratio}}


def test_a_row_where_ours_does_more_work_than_keras_hub_also_gives_the_ratio_per_flop(tmp_path):
    """SpanBERT's boundary head is work keras-hub's masked-LM task does not do: its ratio is also given per matmul
    FLOP; a row whose objectives keras-hub's step matches in matmul work (BERT's NSP head is [batch, hidden]
    products, left out of the counts) gets the ratio alone. `--render` writes the table again from the JSON."""
    import json

    from benchmarks.peer_models import train_flops
    from benchmarks.peer_suite import main

    spanbert, small = MODELS["spanbert"], SHAPES["small"]
    extra = train_flops(spanbert, small) / train_flops(spanbert, small, masked_lm_only=True)
    assert 1.2 < extra < 1.3  # the boundary head's vocabulary projection doubles the masked-LM head's
    assert train_flops(MODELS["bert"], small, masked_lm_only=True) == train_flops(MODELS["bert"], small)
    report_path = tmp_path / "peers_test.json"
    report_path.write_text(json.dumps(_report([_entry("spanbert", 0.85), _entry("bert", 0.9)])))
    main(["--render", str(report_path)])
    rows = {line.split(" (")[0].strip("| "): line for line in report_path.with_suffix(".md").read_text().splitlines()
            if line.startswith("| spanbert") or line.startswith("| bert")}
    assert f"| 0.85 ({0.85 * extra:.2f} per FLOP) |" in rows["spanbert"]
    assert "| 0.90 |" in rows["bert"] and "per FLOP" not in rows["bert"]
    assert report_path.with_suffix(".png").is_file()
    assert rows["bert"].endswith("| 100 / - | 60 / - |")  # the process's peak, and what training added to it


def test_render_of_a_file_that_is_no_report_is_one_line(tmp_path):
    from benchmarks.peer_suite import main

    (tmp_path / "other.json").write_text('{"benchmark": "serving"}')
    for path, said in ((tmp_path / "missing.json", "cannot read a report"), (tmp_path / "other.json", "not a peer")):
        with pytest.raises(SystemExit, match=f"^--render: .*{said}"):
            main(["--render", str(path)])


def test_the_memory_training_adds_is_the_peak_beyond_the_built_model_median_over_rounds():
    """A CPU row: each round's peak beyond its resident memory once the model and arrays were built (the
    runtime's own footprint left out); a GPU row's memory is its device allocator's, and rounds from before the
    resident memory was recorded give nothing."""
    from benchmarks.peer_suite import training_memory

    rounds = [{"peak_mib": 900.0, "resident_before_mib": 500.0}, {"peak_mib": 1000.0, "resident_before_mib": 450.0},
              {"peak_mib": 950.0, "resident_before_mib": 400.0}]
    assert training_memory(rounds) == {"training_mib": 550.0}
    assert training_memory([{**r, "device_peak_mib": 10.0} for r in rounds]) == {}
    assert training_memory([{"peak_mib": 900.0}]) == {}
