"""The word-in-context kind of a model with one contextual vector per word (ELMo's): how one word's served
vectors differ with its senses."""

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops of the SavedModel

from keras_bertology.outputs.kind import OutputKind

# The documents' contrast: "broke" in three senses. Vectors that depend on context set them apart.
CONTEXT_WORD = "broke"
# Each sense with words of its own on both sides: a backward LM reads the right context, so "broke ." in all
# three would leave its half of the vectors alike whatever the model learned.
CONTEXT_SENTENCES = ("The vase broke into pieces.", "Dawn broke over the hills.", "The news broke on the radio.")


class WordInContext(OutputKind):
    name = "word_in_context"

    def examples(self, run):
        in_context = context_examples(run.export_dir, run.assets(), run.tokenizer)
        return {"word_in_context": in_context} if in_context else {}

    def summary_lines(self, metrics):
        example = metrics.get("word_in_context")
        if not example:
            return []
        sentences, cosine = example["sentences"], example["cosine"]
        lines = [f"what the model learned: '{example['word']}' in context, cosine similarity of its vectors"]
        lines += [f"  {sentences[i]!r} ~ {sentences[j]!r}: {cosine[i][j]:.4f}"
                  for i in range(len(sentences)) for j in range(i + 1, len(sentences))]
        lines.append(f"  for scale, two different words of these sentences: {example['other_words']:.4f} on average")
        return lines


WORD_IN_CONTEXT = WordInContext()


def context_examples(export_dir, assets, tokenizer, word=CONTEXT_WORD, sentences=CONTEXT_SENTENCES):
    """{"word", "sentences", "cosine" [3][3], "other_words"}: the cosine similarities of `word`'s served
    vectors in `sentences`, and for scale the mean cosine between two different words of them (contextual
    vectors share much of their direction); the vectors are the output that the export's `assets` name
    ("context_output"). None without one, or when the word is not one token of the vocabulary (nor an
    unknown one: its id must find it)."""
    word_ids = tokenizer.tokenize(tf.constant([tokenizer.word_prefix + word]))[0].numpy().tolist()
    if "context_output" not in assets or len(word_ids) != 1 or word_ids[0] == tokenizer.optional_id("unk"):
        return None
    model = tf.saved_model.load(str(export_dir))  # kept: its functions read its variables
    served = model.serve(tf.constant(list(sentences)))
    vectors, token_ids = served[assets["context_output"]].numpy(), served["token_ids"].numpy()
    positions = [list(token_ids[row]).index(word_ids[0]) for row in range(len(sentences))]
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    unit = vectors / np.maximum(norms, 1e-12)
    chosen = unit[np.arange(len(sentences)), positions]
    words = norms[..., 0] > 0  # padding is served as zeros
    words[np.arange(len(sentences)), positions] = False
    others = unit[words]
    between = (others @ others.T)[np.triu_indices(len(others), 1)]
    return {"word": word, "sentences": list(sentences), "cosine": np.round(chosen @ chosen.T, 4).tolist(),
            "other_words": round(float(between.mean()), 4)}
