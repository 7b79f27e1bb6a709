"""Which attention kinds reach cuDNN's fused flash attention on a GPU, and do they agree with the written-out one.

For each kind (padding, causal, a relative bias, the sliding window in
blocks) it builds one attention layer in mixed bfloat16 on the JAX backend,
compiles its forward pass and its input gradient, reports whether the
compiled program calls cuDNN's fused attention (a `__cudnn$fmha` custom
call) and the largest difference from the same layer with its probabilities
written out. Run on the GPU machine (benchmarks/gpu_peers.sh attention);
on a CPU every kind reports "xla".

    KERAS_BACKEND=jax python -m benchmarks.gpu_attention_check --out DIR
"""

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.bench_mlm import atomic_write

HIDDEN, HEADS = 768, 12


def _kinds(length):
    rng = np.random.default_rng(0)
    padding = np.ones((2, 1, length), bool)
    padding[1, :, length // 2:] = False
    return {
        "padded": ({}, {"attention_mask": padding}),
        "causal": ({"causal": True}, {"attention_mask": padding}),
        "relative bias (T5)": ({"score_scale": 1.0}, {"score_terms": (
            rng.normal(size=(1, HEADS, length, length)).astype("float32"),)}),
        "sliding window in blocks": ({"window": 128}, {"attention_mask": padding}),
    }


def check(length):
    import jax
    import keras

    from keras_bertology.layers import MultiHeadSelfAttention

    rows = {}
    x = np.random.default_rng(1).normal(size=(2, length, HIDDEN)).astype("float32")
    for name, (options, kwargs) in _kinds(length).items():
        layer = MultiHeadSelfAttention(HEADS, dtype="mixed_bfloat16", **options)
        layer.build((None, length, HIDDEN))

        def loss(inputs, written_out=False):
            dropout = (lambda probs: probs) if written_out else None
            layer._probability_dropout = lambda training: dropout
            return keras.ops.sum(keras.ops.cast(layer(inputs, **kwargs), "float32") ** 2)

        step = jax.jit(jax.value_and_grad(loss), static_argnums=1)
        program = step.lower(x, False).compile().as_text()
        (fused, fused_grad), (written, written_grad) = step(x, False), step(x, True)
        rows[name] = {"length": length, "cudnn_fused": "__cudnn$fmha" in program,
                      "loss_relative_difference": float(abs(fused - written) / abs(written)),
                      "gradient_max_difference": float(np.max(np.abs(np.asarray(fused_grad) - np.asarray(written_grad)))),
                      "gradient_scale": float(np.max(np.abs(np.asarray(written_grad))))}
        print(f"{length:5d} {name:26s} cuDNN fused: {rows[name]['cudnn_fused']!s:5s} loss rel. diff "
              f"{rows[name]['loss_relative_difference']:.2e}, grad max diff {rows[name]['gradient_max_difference']:.2e}"
              f" of {rows[name]['gradient_scale']:.2e}", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", nargs="+", type=int, default=[512, 2048])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if any(length < 2 or length % 2 for length in args.lengths):
        parser.error("--lengths must be even and at least 2 (cuDNN's kernel with a bias needs even lengths)")
    import jax

    report = {"device": jax.devices()[0].device_kind, "kinds": {str(n): check(n) for n in args.lengths}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "gpu_attention_check.json") as handle:
        json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
