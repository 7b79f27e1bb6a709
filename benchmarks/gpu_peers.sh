#!/usr/bin/env bash
# The peer suite on a GPU machine (see ../shared/GPU.md): ours and keras-hub on Keras' JAX backend,
# transformers on PyTorch (eager and torch.compile), bf16, the shapes of the H100 figures.
#
#   bash benchmarks/gpu_peers.sh download            # here: the Keras wheels the GPU machine lacks, into .whl/
#   bash benchmarks/gpu_peers.sh run OUT_DIR [FLAGS]  # there: writes OUT_DIR/gpu_peers.{json,md,png}
#   bash benchmarks/gpu_peers.sh attention OUT_DIR [SHAPE ...]  # there: gpu_attention_check, then bert-base
#       at gpu_base512 and gpu_base128 and ModernBERT's sizes at gpu_long8192 (ours also with its attention
#       written out), one round each: OUT_DIR/gpu_attention_check.json, gpu_<shape>.{json,md,png}
#   bash benchmarks/gpu_peers.sh base OUT_DIR  # there: BERT without attention dropout at 512 tokens (every system
#       on a fused kernel) against transformers, then bert-base at 128 tokens: gpu_base512_no_attention_dropout.*,
#       gpu_base128.* (one round each, about 8 minutes on an H200)
#   bash benchmarks/gpu_peers.sh dropout OUT_DIR  # there: BERT without any dropout at 512 and 128 tokens, ours
#       against torch.compile: what drawing dropout's random bits costs (gpu_bert_no_dropout.*)
#   bash benchmarks/gpu_peers.sh long OUT_DIR [ARGS]  # there: bench_long_sequences on the GPU, OUT_DIR/long_sequences_gpu.*
#   bash benchmarks/gpu_peers.sh profile OUT_DIR [MODEL SHAPE]  # there: device time per kernel and per kind of one
#       training step, ours against torch eager and torch.compile (gpu_profile.py; by default BERT without attention
#       dropout at gpu_base512, where ours trails torch.compile): OUT_DIR/gpu_profile_<system>.json, gpu_profile.md
# FLAGS are peer_suite's (--models, --shapes, --systems, --rounds, --name ...), after the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
suite() {
  # Other processes' CPU use says nothing about a GPU's timing: never wait for a quiet machine there.
  python3 -m benchmarks.peer_suite --backend jax --device gpu --precisions mixed_bfloat16 --max-others-busy 1 \
    --out "$out" "$@"
}
case "${1:-}" in
  download)
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
      keras==3.15.1 keras-hub==0.32.0 namex optree kagglehub kagglesdk==0.1.28
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude ;;
  run|attention|base|dropout|long|profile)
    out="${2:?give the output folder}"
    python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl
    export PYTHONPATH="$PWD/.site:$PWD" KERAS_BACKEND=jax PYTHONUNBUFFERED=1
    case "$1" in
      run) suite --shapes gpu_base128 gpu_base512 gpu_large128 --rounds 2 --name gpu_peers "${@:3}" ;;
      attention)
        shapes=("${@:3}")
        [ ${#shapes[@]} -gt 0 ] || shapes=(gpu_base512 gpu_long8192 gpu_base128)
        python3 -m benchmarks.gpu_attention_check --out "$out"
        for shape in "${shapes[@]}"; do
          if [ "$shape" = gpu_long8192 ]; then
            suite --models modernbert --shapes "$shape" --rounds 1 --name "$shape" \
              --systems ours ours_written_out torch_eager torch_compile
          else
            suite --models bert --shapes "$shape" --rounds 1 --name "$shape"
          fi
        done ;;
      base)
        suite --models bert-no-attention-dropout --shapes gpu_base512 --rounds 1 \
          --systems ours torch_eager torch_compile --name gpu_base512_no_attention_dropout
        suite --models bert --shapes gpu_base128 --rounds 1 --name gpu_base128 ;;
      dropout) suite --models bert-no-dropout --shapes gpu_base512 gpu_base128 --rounds 1 \
                 --systems ours torch_compile --name gpu_bert_no_dropout ;;
      long) python3 -m benchmarks.bench_long_sequences --device gpu --name long_sequences_gpu --out "$out" "${@:3}" ;;
      profile)
        row=(--model "${3:-bert-no-attention-dropout}" --shape "${4:-gpu_base512}" --out "$out")
        for system in ours torch_eager torch_compile; do  # one fresh process each, as the suite runs them
          python3 -m benchmarks.gpu_profile --system "$system" "${row[@]}"
        done
        python3 -m benchmarks.gpu_profile --compare --out "$out" ;;
    esac ;;
  *) echo "usage: $0 download | run OUT_DIR [FLAGS] | attention OUT_DIR [SHAPE ...] | base OUT_DIR | dropout OUT_DIR | long OUT_DIR [bench_long_sequences flags] | profile OUT_DIR [MODEL SHAPE]" >&2
     exit 2 ;;
esac
