"""Writing a SavedModel from Keras layers, a tokenizer and endpoint functions, tracing each endpoint once."""

import errno
import functools

import keras
import tensorflow as tf


def write_saved_model(path, tracked, endpoints):
    """Write a SavedModel at `path` whose signatures are `endpoints`, {name: (function, input signature)};
    the first is also `serving_default`.

    `tracked` are the objects whose variables and resources the endpoints use
    (Keras layers, `tf.Module` tokenizers). `keras.export.ExportArchive` traces
    every endpoint to list the variables it reads, then `tf.saved_model.save`
    traces them all again in its save context, and it saves every variable
    twice; here the root holds the variables and the tokenizers itself, so each
    endpoint is traced once and each variable saved once (an export takes about
    half the time and two thirds of the disk).

    Returns {endpoint name: the sorted names of its outputs, or None for one unnamed output}.
    """
    root = tf.Module()
    # The TensorFlow variables under the Keras ones, each saved once and referenced directly: a
    # TF1-style loader (saved_model_cli run) restores only those it reaches so, not Keras layers' own.
    root.model_variables = [variable.value for layer in tracked if isinstance(layer, keras.layers.Layer)
                            for variable in layer.variables]
    root.resources = [obj for obj in tracked if not isinstance(obj, keras.layers.Layer)]  # tokenizers' tables
    signatures, outputs = {}, {}
    for name, (function, input_signature) in endpoints.items():
        signatures[name] = tf.function(_recording(function, outputs, name), input_signature=input_signature,
                                       autograph=False)
        setattr(root, name, signatures[name])
    signatures["serving_default"] = signatures[next(iter(endpoints))]
    try:
        tf.saved_model.save(root, str(path), signatures=signatures)
    except (tf.errors.ResourceExhaustedError, tf.errors.UnknownError) as error:
        # TensorFlow's file writers report a full disk as these, not OSError: give the CLI's one-line form.
        if isinstance(error, tf.errors.UnknownError) and "space left" not in str(error).lower():
            raise
        raise OSError(errno.ENOSPC, "no space left on the device while writing the SavedModel",
                      str(path)) from None
    return {name: sorted(value) if isinstance(value, dict) else None for name, value in outputs.items()}


def _recording(function, outputs, name):
    """`function`, keeping what its trace returned in `outputs[name]`: the save traces each endpoint in a
    context of its own, and asking the function for its outputs afterwards would trace it again (half an
    export's tracing)."""
    @functools.wraps(function)  # the signature's inputs keep the function's argument names
    def traced(*args, **kwargs):
        outputs[name] = function(*args, **kwargs)
        return outputs[name]
    return traced
