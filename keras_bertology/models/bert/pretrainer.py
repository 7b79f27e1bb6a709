"""BERT pretraining: masked LM + next-sentence prediction on top of a backbone."""

import keras

from keras_bertology.layers import MaskedLMHead, PooledClassificationHead


@keras.saving.register_keras_serializable(package="keras_bertology")
class BertPretrainer(keras.Model):
    """Backbone + MLM head (tied to the token embeddings) + optional NSP head.

    Inputs: the backbone's input dict plus `mask_positions` [B, P] int32.
    Outputs: `{"mlm": [B, P, V] logits}` and, with next-sentence prediction,
    `"nsp": [B, 2] logits}`. `compile()` without arguments sets up the BERT
    objective: MLM cross-entropy averaged over real predictions (padding
    predictions carry sample weight 0), NSP cross-entropy, and the accuracy of
    each, reported as `mlm_loss`, `mlm_accuracy`, `nsp_loss`, `nsp_accuracy`.

    Args:
        backbone: a `BertBackbone` (with pooler when NSP is on).
        next_sentence_prediction: bool, add the NSP objective.
        mlm_activation: str, activation of the MLM head's transform; None takes
            the backbone's, as BERT's head does.

    Example:
        >>> from keras_bertology.models import BertBackbone, BertPretrainer
        >>> backbone = BertBackbone(vocab_size=100, num_layers=1, num_heads=2,
        ...                         hidden_size=16, intermediate_size=32)
        >>> model = BertPretrainer(backbone)
        >>> model.compile()
    """

    def __init__(self, backbone, next_sentence_prediction=True, mlm_activation=None, **kwargs):
        mlm_activation = mlm_activation or backbone.activation
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        encoded = backbone({k: v for k, v in inputs.items() if k in backbone.input})
        mlm_head = MaskedLMHead(
            backbone.vocab_size,
            token_embedding=backbone.token_embedding,
            activation=mlm_activation,
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            initializer_range=backbone.initializer_range,
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )
        outputs = {"mlm": mlm_head(encoded["sequence_output"], inputs["mask_positions"])}
        if next_sentence_prediction:
            if "pooled_output" not in encoded:
                raise ValueError("next-sentence prediction needs a backbone with a pooler")
            outputs["nsp"] = PooledClassificationHead(
                2, initializer_range=backbone.initializer_range,
                dtype=backbone.dtype_policy, name="nsp_head",
            )(encoded["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone = backbone
        self.next_sentence_prediction = next_sentence_prediction
        self.mlm_activation = mlm_activation

    @property
    def objectives(self):
        """Names of the outputs this pretrainer trains."""
        return ["mlm", "nsp"] if self.next_sentence_prediction else ["mlm"]

    def compile(self, optimizer="adamw", loss=None, weighted_metrics=None, **kwargs):
        """Compile with the pretraining losses and per-objective accuracy unless given."""
        if loss is None:
            loss = {
                "mlm": keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True, reduction="mean_with_sample_weight"
                ),
                "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            }
            loss = {name: loss[name] for name in self.objectives}
        if weighted_metrics is None:
            weighted_metrics = self._default_metrics()
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs)

    def _default_metrics(self):
        """Per-objective accuracy; Keras prefixes the output name only with several outputs."""
        if len(self.objectives) > 1:
            return {
                name: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                for name in self.objectives
            }
        (name,) = self.objectives
        return {
            name: [
                keras.metrics.SparseCategoricalAccuracy(name=f"{name}_accuracy"),
                keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name=f"{name}_loss"),
            ]
        }

    def get_compile_config(self):
        if not self.compiled:
            return None
        return {"optimizer": keras.saving.serialize_keras_object(self.optimizer)}

    def compile_from_config(self, config):
        """Reloaded pretrainers come back with the default objective and their optimizer."""
        self.compile(optimizer=keras.saving.deserialize_keras_object(config["optimizer"]))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def split_features(self, features):
        """Turn a masked-batch feature dict into Keras' `(x, y, sample_weight)`.

        Padding prediction slots have `mask_weights` 0, so they count neither
        in the MLM loss nor in its accuracy.
        """
        x = {name: keras.ops.cast(features[name], "int32") for name in self.input}
        y = {"mlm": features["mask_ids"]}
        sample_weight = {"mlm": features["mask_weights"]}
        if self.next_sentence_prediction:
            y["nsp"] = features["nsp_labels"]
            sample_weight["nsp"] = keras.ops.ones_like(features["nsp_labels"], dtype="float32")
        return x, y, sample_weight

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "next_sentence_prediction": self.next_sentence_prediction,
            "mlm_activation": self.mlm_activation,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
