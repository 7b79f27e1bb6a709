"""The output kinds by name: the five of the library, and those a plug-in adds with `register_output_kind`."""

from keras_bertology.errors import ConfigError
from keras_bertology.outputs.continuation import CONTINUATION
from keras_bertology.outputs.fill_in import FILL_IN
from keras_bertology.outputs.span_fill import SPAN_FILL
from keras_bertology.outputs.stream_perplexity import STREAM_PERPLEXITY
from keras_bertology.outputs.word_in_context import WORD_IN_CONTEXT

OUTPUT_KINDS = {}


def register_output_kind(kind):
    """Make `kind` (an `OutputKind`) available to the pretrainers that declare its name."""
    OUTPUT_KINDS[kind.name] = kind
    return kind


for _kind in (FILL_IN, CONTINUATION, SPAN_FILL, WORD_IN_CONTEXT, STREAM_PERPLEXITY):
    register_output_kind(_kind)


def kinds_of(pretrainer):
    """The `OutputKind`s `pretrainer` declares, in its order; none without a pretrainer (an encoder alone)."""
    names = pretrainer.output_kinds if pretrainer is not None else ()
    unknown = [name for name in names if name not in OUTPUT_KINDS]
    if unknown:
        raise ConfigError(f"{type(pretrainer).__name__} declares the output kinds {', '.join(unknown)}, which are "
                          f"not registered; known: {', '.join(OUTPUT_KINDS)}")
    return [OUTPUT_KINDS[name] for name in names]


def every_run_entries():
    """The metrics entries every run has, whatever its model's kinds (`OutputKind.every_run`)."""
    return {key: value for kind in OUTPUT_KINDS.values() for key, value in kind.every_run.items()}
