"""The processes of the serving benchmark: preparing a model's assets, and timing one system on them.

Every job runs in a fresh interpreter (`python -m benchmarks.serving_workers JOB SPEC_JSON`) and imports
only what its system needs: timing ours imports tensorflow and tensorflow_text and loads the SavedModel,
nothing of keras_bertology, as a server would. Module-level imports are the standard library's for that
reason.
"""

import json
import os
import sys
import time
from pathlib import Path

MAX_TOKENS = 512  # every system truncates here; ours is exported at this sequence length
# The XLA export's length buckets: XLA compiles once per shape, so it serves a handful of shapes.
XLA_BUCKETS = (16, 32, 64, 128, 256, 512)
BATCH = 32


def cores():
    """The CPUs this process may use: what TensorFlow sizes its intra-op pool by."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# --------------------------------------------------------------------------- preparing (keras_bertology, torch)

def prepare_ours(spec):
    """Export ours as the library does, write the vocabulary for the peers and the timed texts."""
    import tensorflow as tf

    from keras_bertology.data.corpus import default_corpus_paths, read_corpus
    from keras_bertology.export import export_saved_model
    from keras_bertology.models.registry import get_family
    from keras_bertology.runs import RunModel

    work = Path(spec["work"])
    family = get_family(spec["family"])
    sentences = [s for document in read_corpus([str(default_corpus_paths()[0])]) for s in document]
    tokenizer = _tokenizer(spec, family, sentences)
    # The texts first: saving a SentencePiece tokenizer leaves its eager resource unusable.
    texts = {name: _texts(tokenizer, sentences, tokens) for name, tokens in spec["lengths"].items()}
    (work / "texts.json").write_text(json.dumps(texts))
    ids = {name: [row.tolist() for row in tokenizer.tokenize(_constant(group)).numpy()] for name, group in texts.items()}
    (work / "ours_ids.json").write_text(json.dumps(ids))
    tokenizer.save(work / "tokenizer")
    config = family.backbone_config(spec["preset"], vocab_size=tokenizer.vocab_size, **spec.get("overrides", {}))
    tf.keras.utils.set_random_seed(0)
    backbone = family.backbone_cls(**config)
    pretrainer = family.build_pretrainer(backbone, None, spec["preset"], batch_size=BATCH)  # XLNet streams need it
    run = RunModel(spec["family"], backbone, tokenizer, MAX_TOKENS, pretrainer, spec["preset"])
    export_saved_model(run, work / "saved_model")
    if "ours_xla" in spec["systems"]:
        export_saved_model(run, work / "saved_model_xla", length_buckets=XLA_BUCKETS, xla=True)
    text_model = {"missing": "not asked for"}
    if {"ours_onnx", "ours_onnx_int8", "ours_onnx_ort", "ours_onnx_text"} & set(spec["systems"]):
        from keras_bertology.export.onnx import export_onnx

        text_model = export_onnx(run, work / "ours_onnx",
                                 quantize="int8" if "ours_onnx_int8" in spec["systems"] else None)["text_model"]
    fused = {"ort_fused": _ort_optimized(work / "ours_onnx", config)} if "ours_onnx_ort" in spec["systems"] else {}
    return {"config": config, "tokenizer": type(tokenizer).__name__, "vocab_size": tokenizer.vocab_size,
            "lower_case": getattr(tokenizer, "lower_case", None), "text_model": text_model, **fused}


def _ort_optimized(folder, config):
    """`folder`/model.onnx through ONNX Runtime's transformer optimizer (BERT's fusions: attention, skip layer
    norm, GELU, ...) written as model.ort.onnx; {fused operator: count}."""
    from onnxruntime.transformers import optimizer

    optimized = optimizer.optimize_model(str(folder / "model.onnx"), model_type="bert",
                                         num_heads=config["num_heads"], hidden_size=config["hidden_size"],
                                         opt_level=0)  # its own fusions only; the session's run when it loads
    optimized.save_model_to_file(str(folder / "model.ort.onnx"))
    return {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}


def _tokenizer(spec, family, sentences):
    """BERT's real uncased WordPiece vocabulary where the family uses it, else the family's own trained one."""
    from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer

    if spec["vocab_file"]:
        vocab = Path(spec["vocab_file"]).read_text(encoding="utf-8").splitlines()
        return WordPieceTokenizer(vocab, lower_case=True)
    return family.train_tokenizer(sentences[:20000], spec["trained_vocab_size"])


def _texts(tokenizer, sentences, tokens, count=BATCH):
    """`count` different texts of about `tokens` pieces with [CLS] and [SEP] (whole words from consecutive
    corpus sentences, each text starting further into the corpus)."""
    budget = tokens - 2
    texts = []
    for index in range(count):
        words = " ".join(sentences[index * 97:index * 97 + budget + 40]).split()
        pieces = tokenizer.tokenize(_constant(words)).row_lengths().numpy()
        used, kept = 0, []
        for word, size in zip(words, pieces):
            if used + size > budget:
                break
            used += size
            kept.append(word)
        texts.append(" ".join(kept))
    return texts


def _constant(strings):
    import tensorflow as tf

    return tf.constant(strings, tf.string)


def prepare_peers(spec):
    """transformers' tokenizer checked against ours on the timed texts, and the twin exported to ONNX."""
    import torch

    work = Path(spec["work"])
    tokenizer = peer_tokenizer(spec)
    agreement = same_ids(spec, tokenizer)
    model = seeded_hf_model(spec, tokenizer)
    facts = {"same_ids_share": agreement, "num_params": sum(p.numel() for p in model.parameters()),
             "peer_vocab_size": model.config.vocab_size}
    if not {"onnxruntime", "onnxruntime_ort"} & set(spec["systems"]):
        return facts
    texts = ["Now is the winter of our discontent", "made glorious summer"]
    inputs = peer_inputs(spec, tokenizer, texts)
    names = list(inputs)
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    exporter = "dynamo"
    try:
        torch.onnx.export(model, (), str(work / "model.onnx"), kwargs=inputs, input_names=names,
                          output_names=["last_hidden_state"], dynamo=True, external_data=False,
                          dynamic_shapes={name: {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")}
                                          for name in names})
    except Exception as error:  # noqa: BLE001 - the TorchScript exporter is the documented fallback
        print(f"dynamo ONNX export failed ({type(error).__name__}: {error}); using dynamo=False", flush=True)
        exporter = "torchscript"
        torch.onnx.export(model, tuple(inputs[name] for name in names), str(work / "model.onnx"),
                          input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes, dynamo=False)
    fused = {"peer_ort_fused": _ort_optimized(work, spec["config"])} if "onnxruntime_ort" in spec["systems"] else {}
    return {**facts, "onnx_exporter": exporter, "onnx_inputs": names, **fused}


def same_ids(spec, tokenizer):
    """{length: share of the timed texts the peer's tokenizer splits into exactly our ids}; a WordPiece
    peer must agree (transformers 5 silently ignores `vocab_file=`, giving [UNK] everywhere)."""
    work = Path(spec["work"])
    texts, ours = (json.loads((work / name).read_text()) for name in ("texts.json", "ours_ids.json"))
    shares = {name: sum(tokenizer(text, add_special_tokens=False)["input_ids"] == ids
                        for text, ids in zip(texts[name], ours[name])) / len(texts[name]) for name in texts}
    if (work / "tokenizer" / "vocab.txt").is_file() and min(shares.values()) < 0.9:
        raise RuntimeError(f"transformers' WordPiece tokenizer disagrees with ours: same ids on {shares}")
    return shares


def seeded_hf_model(spec, tokenizer):
    """The twin with fixed random weights: every process builds the same one (the weights do not change
    the speed; building beats saving and loading a base-sized model)."""
    import torch

    torch.manual_seed(0)
    return hf_model(spec, len(tokenizer)).eval()


def hf_model(spec, tokenizer_size):
    """The transformers encoder with our backbone's sizes (`spec["config"]`) and vocabulary, grown to the
    peer tokenizer's ids where its class adds special tokens a trained SentencePiece model lacks."""
    import transformers

    config = dict(spec["config"], vocab_size=max(spec["config"]["vocab_size"], tokenizer_size))
    sizes = dict(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                 num_hidden_layers=config["num_layers"], num_attention_heads=config["num_heads"],
                 intermediate_size=config["intermediate_size"], layer_norm_eps=config["layer_norm_epsilon"],
                 attn_implementation="sdpa")
    family = spec["family"]
    if family == "xlnet":
        return transformers.XLNetModel(transformers.XLNetConfig(
            vocab_size=config["vocab_size"], d_model=config["hidden_size"], n_layer=config["num_layers"],
            n_head=config["num_heads"], d_inner=config["intermediate_size"], ff_activation=config["activation"],
            untie_r=config["untie_r"], attn_type="bi", layer_norm_eps=config["layer_norm_epsilon"]))
    if family == "roberta":
        return transformers.RobertaModel(transformers.RobertaConfig(
            **sizes, max_position_embeddings=config["max_positions"] + 2, type_vocab_size=1), add_pooling_layer=False)
    if family == "albert":
        return transformers.AlbertModel(transformers.AlbertConfig(
            **sizes, embedding_size=config["embedding_size"], max_position_embeddings=config["max_positions"],
            hidden_act="gelu_new"))
    if family == "distilbert":
        return transformers.DistilBertModel(transformers.DistilBertConfig(
            vocab_size=config["vocab_size"], dim=config["hidden_size"], n_layers=config["num_layers"],
            n_heads=config["num_heads"], hidden_dim=config["intermediate_size"],
            max_position_embeddings=config["max_positions"], activation=config["activation"],
            attn_implementation="sdpa"))
    if family == "electra":
        return transformers.ElectraModel(transformers.ElectraConfig(
            **sizes, embedding_size=config["embedding_size"], max_position_embeddings=config["max_positions"]))
    return transformers.BertModel(transformers.BertConfig(**sizes, max_position_embeddings=config["max_positions"]),
                                  add_pooling_layer=config.get("use_pooler", True))


def peer_inputs(spec, tokenizer, texts):
    """The peer's PyTorch inputs of `texts`, padded to the longest; DistilBERT takes no token types."""
    inputs = dict(tokenizer(texts, padding="longest", truncation=True, max_length=MAX_TOKENS, return_tensors="pt"))
    if spec["family"] == "distilbert":
        inputs.pop("token_type_ids", None)
    return inputs


def peer_tokenizer(spec):
    """transformers' fast tokenizer on the vocabulary files ours was built from."""
    import transformers

    folder = Path(spec["work"]) / "tokenizer"
    if (folder / "vocab.txt").is_file():  # positional: transformers 5 ignores vocab_file=
        return transformers.BertTokenizer(str(folder / "vocab.txt"), do_lower_case=spec["prepared"]["lower_case"])
    # Only the vocabulary files, under transformers' names: ours' tokenizer.json is not transformers' format.
    files = {"vocab.json": "vocab.json", "merges.txt": "merges.txt"} if (folder / "merges.txt").is_file() \
        else {"sentencepiece.model": "spiece.model"}
    hf_folder = Path(spec["work"]) / "hf_tokenizer"
    hf_folder.mkdir(exist_ok=True)
    for ours, theirs in files.items():
        (hf_folder / theirs).write_bytes((folder / ours).read_bytes())
    if "vocab.json" in files:
        return transformers.RobertaTokenizer.from_pretrained(str(hf_folder))
    # A SentencePiece model (ALBERT's, XLNet's, and our RoBERTa's BPE one) runs in ALBERT's or XLNet's class;
    # same_ids_share in the report says how closely it agrees with ours.
    if spec["family"] == "albert":
        return transformers.AlbertTokenizer.from_pretrained(str(hf_folder))
    return transformers.XLNetTokenizer.from_pretrained(str(hf_folder), do_lower_case=False)


# --------------------------------------------------------------------------- timing one system

def ours_endpoint(spec, xla):
    """Raw strings -> (sequence-axis length); only tensorflow, tensorflow_text and the SavedModel (the one
    exported with `--serving-xla` when `xla`)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the tokenizer's ops

    served = tf.saved_model.load(str(Path(spec["work"]) / ("saved_model_xla" if xla else "saved_model")))

    def call(texts):
        outputs = served.serve(tf.constant(texts))
        return int(outputs["token_ids"].shape[1])

    return call, {"tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads() or cores()}


def torch_endpoint(spec, compiled):
    """transformers on PyTorch, eager or `torch.compile(dynamic=True)`, with its fast tokenizer."""
    import torch

    torch.set_num_threads(cores())
    tokenizer = peer_tokenizer(spec)
    model = seeded_hf_model(spec, tokenizer)
    forward = torch.compile(model, dynamic=True) if compiled else model

    def call(texts):
        inputs = peer_inputs(spec, tokenizer, texts)
        with torch.inference_mode():
            forward(**inputs)
        return int(inputs["input_ids"].shape[1])

    return call, {"torch_threads": torch.get_num_threads()}


# Our ONNX model's input names for transformers' tokenizer's outputs.
OUR_ONNX_NAMES = {"token_ids": "input_ids", "padding_mask": "attention_mask", "segment_ids": "token_type_ids"}
# Our ONNX files fed ids by transformers' tokenizer, by system.
OUR_ONNX_FILES = {"ours_onnx": "ours_onnx/model.onnx", "ours_onnx_int8": "ours_onnx/model.int8.onnx",
                  "ours_onnx_ort": "ours_onnx/model.ort.onnx"}


def onnx_endpoint(spec, model_file="model.onnx", names_in_tokenizer=None, dtype="int64"):
    """ONNX Runtime (CPUExecutionProvider) on an ONNX file of the work folder (the twin's, or ours with
    `names_in_tokenizer` mapping its inputs to the tokenizer's outputs), with transformers' fast tokenizer."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = cores()
    session = onnxruntime.InferenceSession(str(Path(spec["work"]) / model_file), options,
                                           providers=["CPUExecutionProvider"])
    names = {node.name: (names_in_tokenizer or {}).get(node.name, node.name) for node in session.get_inputs()}
    tokenizer = peer_tokenizer(spec)

    def call(texts):
        inputs = tokenizer(texts, padding="longest", truncation=True, max_length=MAX_TOKENS, return_tensors="np")
        session.run(None, {name: inputs[source].astype(dtype) for name, source in names.items()})
        return int(inputs["input_ids"].shape[1])

    return call, {"onnxruntime_intra_op_threads": cores()}


def onnx_text_endpoint(spec):
    """ONNX Runtime on our string model: texts in, the tokenizer inside the graph (ONNX Runtime Extensions)."""
    import numpy as np
    import onnxruntime
    import onnxruntime_extensions

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = cores()
    options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    session = onnxruntime.InferenceSession(str(Path(spec["work"]) / "ours_onnx" / "model.text.onnx"), options,
                                           providers=["CPUExecutionProvider"])

    def call(texts):
        outputs = dict(zip([item.name for item in session.get_outputs()],
                           session.run(None, {"text": np.array(texts, dtype=object)})))
        return int(outputs["token_ids"].shape[1])

    return call, {"onnxruntime_intra_op_threads": cores()}


def endpoint(spec):
    system = spec["system"]
    if system in ("ours", "ours_xla"):
        return ours_endpoint(spec, xla=system == "ours_xla")
    if system in ("torch_eager", "torch_compile"):
        return torch_endpoint(spec, compiled=system == "torch_compile")
    if system in ("onnxruntime", "onnxruntime_ort"):
        return onnx_endpoint(spec, "model.ort.onnx" if system == "onnxruntime_ort" else "model.onnx")
    if system in OUR_ONNX_FILES:
        return onnx_endpoint(spec, OUR_ONNX_FILES[system], OUR_ONNX_NAMES, dtype="int32")
    if system == "ours_onnx_text":
        return onnx_text_endpoint(spec)
    raise ValueError(f"unknown system {system!r}")


def time_system(spec):
    """Each length: latency of `calls` single-text calls, then `batches` calls of BATCH texts, after warm-up
    calls at that very shape (which is when torch.compile compiles)."""
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    call, threads = endpoint(spec)
    load_s = time.perf_counter() - started
    texts = json.loads((Path(spec["work"]) / "texts.json").read_text())
    rows = {}
    for length in spec["lengths"]:
        group = texts[length]
        for index in range(spec["warmup"]):
            call(group[index % len(group):][:1])
        latencies, axes = [], set()
        for index in range(spec["calls"]):
            began = time.perf_counter()
            axes.add(call(group[index % len(group):][:1]))
            latencies.append(1000.0 * (time.perf_counter() - began))
        rows[f"{length}/1"] = {"latencies_ms": latencies, "seq_axis": sorted(axes)}
        call(group)  # warm-up at the batch's shape
        began = time.perf_counter()
        axes = {call(group) for _ in range(spec["batches"])}
        seconds = time.perf_counter() - began
        rows[f"{length}/{BATCH}"] = {"seqs_per_sec": BATCH * spec["batches"] / seconds,
                                     "ms_per_batch": 1000.0 * seconds / spec["batches"], "seq_axis": sorted(axes)}
    return {"system": spec["system"], "rows": rows, "load_s": load_s, "cores": cores(), **threads,
            # Other work on the machine shows here: a busy core stalls every thread of a matched pool.
            "loadavg_start": load_start, "loadavg_end": os.getloadavg()[0]}


JOBS = {"prepare_ours": prepare_ours, "prepare_peers": prepare_peers, "time": time_system}


def main(argv):
    job, spec_file, result_file = argv
    result = JOBS[job](json.loads(Path(spec_file).read_text()))
    Path(result_file).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
