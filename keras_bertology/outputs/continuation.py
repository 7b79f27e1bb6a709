"""The continuation kind of a causal LM: `score` and `generate`, and its greedy continuations of held-out
lines with its perplexity on them."""

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops of the SavedModel

from keras_bertology.outputs.causal_lm import causal_lm_endpoints
from keras_bertology.outputs.kind import Endpoints, OutputKind


class Continuation(OutputKind):
    name = "continuation"

    def endpoints(self, serving):
        """Not compiled by XLA: generation's loop grows the sequence every step, XLA would compile each length."""
        causal_lm = serving.pretrainer.causal_lm_model()
        return Endpoints(causal_lm_endpoints(causal_lm, serving.tokenizer, serving.seq_len, serving.input_names,
                                             serving.buckets, serving.strings),
                         model=causal_lm, keep_text_end=True)

    def examples(self, run):
        if not run.held_out:
            return {}
        continuations, perplexity = continuation_examples(run.export_dir, run.held_out)
        return {"continuations": continuations, "held_out_perplexity": perplexity}

    def summary_lines(self, metrics):
        if not metrics.get("continuations"):
            return []
        level = next((summary["chance"]["perplexity"] for summary in metrics["objectives"].values()
                      if "perplexity" in summary["last"] and "perplexity" in summary.get("chance", {})), None)
        lines = [f"what the model learned: perplexity {metrics['held_out_perplexity']:.1f} on lines held out of "
                 f"training" + (f" (unigram level {level:.1f})" if level else "")
                 + "; its greedy continuations of their first halves"]
        for example in metrics["continuations"]:
            lines.append(f"  {example['prompt']} | {example['continuation'].strip()}")
            lines.append(f"      true rest: {example['reference']}")
        return lines


CONTINUATION = Continuation()


def continuation_examples(export_dir, sentences, prompt_share=0.5):
    """(per sentence: its first words as a prompt, the model's greedy continuation and the true rest;
    the lines' perplexity), from the export's `generate` and `score`."""
    model = tf.saved_model.load(str(export_dir))
    prompts, rests = [], []
    for sentence in sentences:
        words = sentence.split()
        cut = max(1, int(len(words) * prompt_share))
        prompts.append(" ".join(words[:cut]))
        rests.append(" ".join(words[cut:]))
    texts = model.generate(tf.constant(prompts))["text"].numpy()
    scored = model.score(tf.constant(sentences))
    tokens = int(scored["num_tokens"].numpy().sum())
    perplexity = float(np.exp(-scored["log_likelihood"].numpy().sum() / max(tokens, 1)))
    examples = [{"prompt": prompt, "continuation": text.decode("utf-8", "replace"), "reference": rest}
                for prompt, text, rest in zip(prompts, texts, rests)]
    return examples, perplexity
