"""Generation speed of T5's SavedModel (`generate`, a graph loop over a key/value cache) against
transformers' `T5ForConditionalGeneration.generate` (greedy, its own cache), same weights, same prompts.

    .venv/bin/python -m benchmarks.bench_generate                  # t5-small's shape, batches 1 and 16
    .venv/bin/python -m benchmarks.bench_generate --layers 2 --hidden 128 --heads 4 --ff 512 --rounds 2

A random T5 of the shape is saved as transformers saves it, beside a SentencePiece vocabulary learned
from the bundled plays, then converted and exported by this library; both generate greedily from the
same raw prompts (ours tokenizes inside the graph, transformers' time covers its tokenizer too) until
</s> or `--new-tokens` tokens. Greedy outputs are equal (tests/models/t5/test_t5_serving.py), so both write the
same tokens; tokens/s is the tokens written over the median wall time of `--rounds` calls after one
warm-up call. Writes benchmarks/results/generate_t5.json and .md.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_mlm import REPO_ROOT, atomic_write, machine_info

PROMPT = "The <extra_id_0> of the king and the <extra_id_1> of his lords, who came to the court that night"


def _folder(args, work):
    """A random T5 of the shape with its spiece.model, as transformers saves it."""
    import torch
    import transformers
    from safetensors.torch import save_file

    from keras_bertology.data.corpus import default_corpus_paths, read_corpus
    from keras_bertology.models.t5.tokenizer import T5_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    sentences = [s for document in read_corpus(default_corpus_paths()[:2]) for s in document]
    pieces = train_sentencepiece(sentences, 2000, model_type="unigram", byte_fallback=False,
                                 special_tokens=T5_SPECIAL_TOKENS)
    (work / "spiece.model").write_bytes(pieces.model_proto)
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=2100, d_model=args.hidden, d_kv=args.hidden // args.heads,
                                   d_ff=args.ff, num_layers=args.layers, num_heads=args.heads,
                                   decoder_start_token_id=0, eos_token_id=1, pad_token_id=0,
                                   architectures=["T5ForConditionalGeneration"])
    model = transformers.T5ForConditionalGeneration(config).eval()
    config.save_pretrained(work)
    save_file({name: value.detach().clone().contiguous() for name, value in model.state_dict().items()},
              str(work / "model.safetensors"))
    return model, transformers.T5Tokenizer.from_pretrained(str(work))


def _timed(call, rounds):
    call()  # warm-up: traces and caches
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        written = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ff", type=int, default=2048)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    import torch

    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.export import export_saved_model

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        hf, hf_tokenizer = _folder(args, work)
        run, _ = convert_hf_checkpoint(work, seq_len=64)
        export_saved_model(run, work / "export")
        served = tf.saved_model.load(str(work / "export"))
        rows = []
        for batch in args.batches:
            prompts = [PROMPT] * batch
            ours_s, ours = _timed(lambda: served.generate_sampling(
                tf.constant(prompts), max_new_tokens=args.new_tokens, temperature=0.0, top_k=0, seed=0), args.rounds)
            tokens = int(ours["num_tokens"].numpy().sum())

            def theirs():
                encoded = hf_tokenizer(prompts, return_tensors="pt")
                with torch.no_grad():
                    return hf.generate(**encoded, max_new_tokens=args.new_tokens, do_sample=False)

            hf_s, _ = _timed(theirs, args.rounds)
            rows.append({"batch": batch, "tokens": tokens, "ours_tokens_per_s": tokens / ours_s,
                         "transformers_tokens_per_s": tokens / hf_s, "ratio": hf_s / ours_s})
            print(f"batch {batch}: {tokens} tokens, ours {tokens / ours_s:.0f}/s, transformers "
                  f"{tokens / hf_s:.0f}/s, ratio {hf_s / ours_s:.2f}", flush=True)
    report = {"shape": vars(args), "machine": machine_info(), "rows": rows}
    lines = ["# T5 generation: SavedModel `generate` vs transformers `generate` (greedy)", "",
             f"{args.layers} + {args.layers} layers, d_model {args.hidden}, {args.heads} heads, d_ff {args.ff}; "
             f"up to {args.new_tokens} new tokens; median of {args.rounds} calls; "
             f"{report['machine']['cpu_model']}, {report['machine']['usable_cpus']} CPUs", "",
             "| batch | tokens | ours tokens/s | transformers tokens/s | ours / transformers |", "|---|---|---|---|---|"]
    lines += [f"| {r['batch']} | {r['tokens']} | {r['ours_tokens_per_s']:.0f} | {r['transformers_tokens_per_s']:.0f} "
              f"| {r['ratio']:.2f} |" for r in rows]
    out = Path(args.out)
    for name, text in (("generate_t5.json", json.dumps(report, indent=2)), ("generate_t5.md", "\n".join(lines))):
        with atomic_write(out / name) as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
