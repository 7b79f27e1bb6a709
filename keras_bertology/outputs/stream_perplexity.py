"""The stream-perplexity kind of a model with segment memory (Transformer-XL's): the held-out lines read as
one stream, with and without the memory carried across segments."""

import tensorflow as tf

from keras_bertology.outputs.kind import OutputKind


class StreamPerplexity(OutputKind):
    name = "stream_perplexity"
    reads_export = False  # the pretrainer carries the memory; the export serves each text alone

    def examples(self, run):
        stream = memory_perplexities(run.pretrainer, run.tokenizer, run.held_out, run.seq_len)
        return {"held_out_stream": stream} if stream else {}

    def summary_lines(self, metrics):
        if not metrics.get("held_out_stream"):
            return []
        carried, alone = metrics["held_out_stream"]["with_memory"], metrics["held_out_stream"]["without_memory"]
        return [f"the held-out lines as one stream of {carried['tokens']:,} tokens in segments of "
                f"{carried['segment_length']}: perplexity {carried['perplexity']:.1f} with a memory of "
                f"{carried['mem_len']} states carried across segments, {alone['perplexity']:.1f} without"]


STREAM_PERPLEXITY = StreamPerplexity()


def memory_perplexities(pretrainer, tokenizer, sentences, segment_length):
    """{"with_memory", "without_memory"} perplexities of the held-out lines read as one stream (each line
    closed by the end-of-text token) in segments of `segment_length` (`Pretrainer.stream_perplexity`);
    None without lines."""
    if not sentences:
        return None
    end = [tokenizer.eot_id]
    stream = [token for row in tokenizer.tokenize(tf.constant(sentences)).to_list() for token in (*row, *end)]
    return {"with_memory": pretrainer.stream_perplexity(stream, segment_length),
            "without_memory": pretrainer.stream_perplexity(stream, segment_length, mem_len=0)}
