"""Experiments: which implementation choices make keras-bertology's MLM train step slower or faster.

Each variant monkeypatches keras-bertology's layers *inside its own worker
process only* (the library files are not touched), then runs the same
measurement as `bench_mlm.py` (same data, optimizer, loss, metric). Variants
run in fresh subprocesses, interleaved round by round (v1, v2, ..., v1, v2, ...);
a measurement during which other processes used more than --max-others-busy of
the CPU is repeated (up to --contention-retries times).

    .venv/bin/python -m benchmarks.mlm_variants --configs small_float32 \
        --variants ours keras_hub ours_gelu_tanh --rounds 3

Variants (see `VARIANTS`):
    ours                 keras-bertology as it is
    keras_hub            keras-hub BertMaskedLM (the reference)
    ours_gelu_tanh       FFN activation = tanh-approximate GELU (what keras-hub uses)
    ours_softmax_compute masked softmax in the compute dtype instead of float32
    ours_additive_mask   mask added as a [B,1,1,L] bias instead of ops.where on [B,N,L,L]
    ours_fused_qkv       one Dense(3H) for query/key/value instead of three Dense(H)
    ours_decoder_fp32    tied MLM decoder (reverse embedding) matmul in float32 under
                         mixed precision (ReversibleEmbedding(reverse_dtype="float32"):
                         the table is autocast to bf16 and cast back)
    ours_decoder_fp32_raw the same, reading the float32 table without the bf16 round trip
    ours_all             gelu_tanh + softmax_compute + additive_mask
    *_xla                the same with jit_compile=True (e.g. ours_xla, keras_hub_xla)
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_mlm  # noqa: E402

BASE_VARIANTS = {
    "ours": (),
    "keras_hub": (),
    "ours_gelu_tanh": ("gelu_tanh",),
    "ours_softmax_compute": ("softmax_compute",),
    "ours_additive_mask": ("additive_mask",),
    "ours_fused_qkv": ("fused_qkv",),
    "ours_decoder_fp32": ("decoder_fp32",),
    "ours_decoder_fp32_raw": ("decoder_fp32_raw",),
    "ours_all": ("gelu_tanh", "softmax_compute", "additive_mask"),
}
VARIANTS = {**BASE_VARIANTS, **{f"{name}_xla": patches for name, patches in BASE_VARIANTS.items()}}


def _patch_attention(softmax_compute=False, additive_mask=False, fused_qkv=False):
    from keras import ops

    from keras_bertology.layers import attention as attention_module

    cls = attention_module.MultiHeadSelfAttention
    original_build = cls.build

    def build(self, input_shape):
        if not fused_qkv:
            return original_build(self, input_shape)
        hidden = input_shape[-1]
        self._head_dim = self.head_dim or hidden // self.num_heads
        inner = self.num_heads * self._head_dim
        self.qkv_dense = self._dense(3 * inner, "qkv")
        self.output_dense = self._dense(hidden, "output")
        self.qkv_dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (inner,))
        self.built = True

    def call(self, x, attention_mask=None, training=None):
        if fused_qkv:
            qkv = self.qkv_dense(x)
            batch, length = ops.shape(x)[0], ops.shape(x)[1]
            qkv = ops.reshape(qkv, (batch, length, 3, self.num_heads, self._head_dim))
            query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        else:
            query = self._split_heads(self.query_dense(x))
            key = self._split_heads(self.key_dense(x))
            value = self._split_heads(self.value_dense(x))
        query = query * ops.cast(1.0 / math.sqrt(self._head_dim), query.dtype)
        scores = ops.einsum("bqnd,bknd->bnqk", query, key)
        score_dtype = self.compute_dtype if softmax_compute else "float32"
        scores = ops.cast(scores, score_dtype)
        if attention_mask is not None:
            keep = ops.expand_dims(ops.cast(attention_mask, "bool"), axis=1)
            if additive_mask:
                bias = (1.0 - ops.cast(keep, score_dtype)) * ops.cast(-1e9, score_dtype)
                scores = scores + bias
            else:
                scores = ops.where(keep, scores, ops.cast(-1e9, score_dtype))
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.dropout_layer(probs, training=training)
        context = ops.einsum("bnqk,bknd->bqnd", probs, value)
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        context = ops.reshape(context, (batch, length, self.num_heads * self._head_dim))
        return self.output_dense(context)

    cls.build = build
    cls.call = call


def _patch_gelu_tanh():
    import functools

    import keras

    from keras_bertology.layers import transformer_block

    cls = transformer_block.TransformerEncoderBlock
    original_build = cls.build

    def build(self, input_shape):
        original_build(self, input_shape)
        self.intermediate_dense.activation = functools.partial(
            keras.activations.gelu, approximate=True
        )

    cls.build = build


def _patch_decoder_fp32():
    from keras_bertology.layers import embeddings

    cls = embeddings.TokenPositionSegmentEmbedding
    original_init = cls.__init__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.token_embedding.reverse_dtype = "float32"

    cls.__init__ = __init__


def _patch_decoder_fp32_raw():
    from keras import ops
    from keras.src.backend.common.variables import AutocastScope

    from keras_bertology.layers import heads

    cls = heads.MaskedLMHead

    def call(self, hidden, mask_positions=None):
        if mask_positions is not None:
            hidden = heads.gather_positions(hidden, mask_positions)
        x = self.layer_norm(self.transform(hidden))
        with AutocastScope(None):  # the float32 variable itself, not its bf16 autocast
            table = self.token_embedding.embeddings.value
            bias = self.output_bias.value
        logits = ops.matmul(ops.cast(x, "float32"), ops.transpose(table))
        return logits + bias

    cls.call = call


def apply_patches(patches):
    if "decoder_fp32_raw" in patches:
        _patch_decoder_fp32_raw()
    if "decoder_fp32" in patches:
        _patch_decoder_fp32()
    if "gelu_tanh" in patches:
        _patch_gelu_tanh()
    attention_flags = {p: True for p in patches if p in ("softmax_compute", "additive_mask", "fused_qkv")}
    if attention_flags:
        _patch_attention(**attention_flags)


def worker(args):
    variant = args.variant
    apply_patches(VARIANTS[variant])
    system = "keras_hub" if variant.startswith("keras_hub") else "ours"
    config = bench_mlm.CONFIGS[args.config]
    result = bench_mlm.measure(
        config, system, args.warmup_steps, args.steps, jit_compile=variant.endswith("_xla")
    )
    result["variant"] = variant
    Path(args.result_file).write_text(json.dumps(result))


def run_variant(variant, config, warmup, steps, tmp):
    result_file = Path(tmp) / f"{variant}.json"
    command = [
        sys.executable, str(Path(__file__).resolve()), "--worker", "--variant", variant,
        "--config", config, "--warmup-steps", str(warmup), "--steps", str(steps),
        "--result-file", str(result_file),
    ]
    proc = subprocess.run(command, env=bench_mlm._worker_env(), cwd=bench_mlm.REPO_ROOT,
                          capture_output=True, text=True, timeout=bench_mlm.SUBPROCESS_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n" + "\n".join((proc.stdout + proc.stderr).splitlines()[-30:]))
    result = json.loads(result_file.read_text())
    result_file.unlink()
    return result


def driver(args):
    summary = {}
    with tempfile.TemporaryDirectory(prefix="mlm_variants_") as tmp:
        for config in args.configs:
            cfg = bench_mlm.CONFIGS[config]
            warmup = args.warmup_steps or cfg.warmup_steps
            steps = args.steps or cfg.steps
            results = {v: [] for v in args.variants}
            for round_index in range(args.rounds):
                for variant in args.variants:
                    for attempt in range(args.contention_retries + 1):
                        r = run_variant(variant, config, warmup, steps, tmp)
                        others = r.get("others_cpu_busy") or 0.0
                        if others <= args.max_others_busy:
                            break
                        print(f"[{config}] {variant}: other processes used {others:.0%} of the CPU, "
                              f"{'measuring again' if attempt < args.contention_retries else 'kept'}",
                              flush=True)
                    results[variant].append(r)
                    print(f"[{config}] round {round_index + 1} {variant:>22}: "
                          f"{r['samples_per_sec']:7.2f} samples/s {r['ms_per_step']:8.1f} ms/step "
                          f"(median step {r['median_step_ms']:.1f} ms) cpu-busy {r['cpu_busy']:.0%} "
                          f"others {r['others_cpu_busy']:.0%} params {r['num_params']}", flush=True)
            reference = args.variants[0]
            ref = statistics.median(r["samples_per_sec"] for r in results[reference])
            summary[config] = {}
            for variant, rs in results.items():
                med = statistics.median(r["samples_per_sec"] for r in rs)
                med_step = statistics.median(r["median_step_ms"] for r in rs)
                summary[config][variant] = {"samples_per_sec": med, "median_step_ms": med_step,
                                            "vs_first": med / ref,
                                            "rounds": [r["samples_per_sec"] for r in rs]}
                print(f"[{config}] {variant:>22}: median {med:7.2f} samples/s, median step "
                      f"{med_step:8.1f} ms, x{med / ref:.3f} vs {reference}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["small_float32"])
    parser.add_argument("--config")
    parser.add_argument("--variants", nargs="+", default=["ours", "keras_hub"], choices=sorted(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--max-others-busy", type=float, default=0.10,
                        help="repeat a measurement when other processes used more CPU than this")
    parser.add_argument("--contention-retries", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
