"""The PyTorch systems of the peer suite: Hugging Face transformers, eager and `torch.compile`d.

Each trains the architecture of one of our pretrainers at the same shape on
the same arrays, with AdamW(1e-4), SDPA attention, and bf16 autocast where
ours trains in mixed_bfloat16. Like ours, it computes masked-LM logits only
at the masked positions (the encoder's states are gathered there before the
head), so both do the same work; the models' own `forward` would project
every token onto the vocabulary. GPT-2 scores every position, as a causal
LM does (ours too).
"""

import torch
import torch.nn.functional as F

from benchmarks.peer_models import generator_width, our_config, synthetic_features, teacher_shape


def _gather(states, positions):
    return states.gather(1, positions.unsqueeze(-1).expand(-1, -1, states.shape[-1]))


def _mlm_loss(logits, batch, labels="mask_ids", weights="mask_weights"):
    losses = F.cross_entropy(logits.flatten(0, 1).float(), batch[labels].flatten(), reduction="none")
    weights = batch[weights].flatten()
    return (losses * weights).sum() / weights.sum()


def _hf_config(cls_name, config, shape, **extra):
    import transformers

    return getattr(transformers, cls_name)(
        vocab_size=config["vocab_size"], hidden_size=shape.hidden_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
        max_position_embeddings=config["max_positions"] + extra.pop("position_offset", 0),
        attn_implementation="sdpa", **extra)


def _bert(config, shape, layout="Bert", **extra):
    """BERT's MLM + NSP (`layout` "Ernie": ERNIE's, with the preset's activation and epsilon)."""
    import transformers

    for ours, theirs in (("dropout", "hidden_dropout_prob"), ("attention_dropout", "attention_probs_dropout_prob")):
        if ours in config:  # a row that sets it (both systems default to 0.1)
            extra[theirs] = config[ours]
    model = getattr(transformers, f"{layout}ForPreTraining")(_hf_config(f"{layout}Config", config, shape, **extra))
    encoder = getattr(model, layout.lower())

    def loss(batch):
        states, pooled = encoder(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                                 attention_mask=batch["padding_mask"], return_dict=False)[:2]
        mlm = _mlm_loss(model.cls.predictions(_gather(states, batch["mask_positions"])), batch)
        return mlm + F.cross_entropy(model.cls.seq_relationship(pooled).float(), batch["nsp_labels"])

    return model, loss


def _ernie(config, shape):
    return _bert(config, shape, "Ernie", hidden_act=config["activation"], layer_norm_eps=config["layer_norm_epsilon"])


def _bigbird(config, shape):
    """BigBird's MLM with ITC block-sparse attention of the preset's blocks (full below the length where
    block-sparse applies, in both systems)."""
    from transformers import BigBirdConfig, BigBirdForMaskedLM

    attention = config["attention_options"]
    model = BigBirdForMaskedLM(BigBirdConfig(
        vocab_size=config["vocab_size"], hidden_size=shape.hidden_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
        max_position_embeddings=config["max_positions"], attention_type="block_sparse",
        block_size=attention["block_size"], num_random_blocks=attention["random_blocks"],
        layer_norm_eps=config["layer_norm_epsilon"]))

    def loss(batch):
        states = model.bert(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"], return_dict=False)[0]
        return _mlm_loss(model.cls(_gather(states, batch["mask_positions"])), batch)

    return model, loss


def _roberta(config, shape):
    from transformers import RobertaForMaskedLM

    # RoBERTa's positions start after the padding id: two more rows in its table, as in the released models.
    model = RobertaForMaskedLM(_hf_config("RobertaConfig", config, shape, position_offset=2, type_vocab_size=1,
                                          pad_token_id=1, layer_norm_eps=config["layer_norm_epsilon"]))

    def loss(batch):
        states = model.roberta(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                               return_dict=False)[0]
        return _mlm_loss(model.lm_head(_gather(states, batch["mask_positions"])), batch)

    return model, loss


def _modernbert(config, shape):
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    model = ModernBertForMaskedLM(ModernBertConfig(
        vocab_size=config["vocab_size"], hidden_size=shape.hidden_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
        max_position_embeddings=config["max_positions"], local_attention=config["local_window"],
        global_attn_every_n_layers=config["global_every"], global_rope_theta=config["global_rotary_base"],
        local_rope_theta=config["rotary_base"], norm_eps=config["layer_norm_epsilon"], pad_token_id=0,
        bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, attn_implementation="sdpa"))

    def loss(batch):
        states = model.model(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"]).last_hidden_state
        return _mlm_loss(model.decoder(model.head(_gather(states, batch["mask_positions"]))), batch)

    return model, loss


def _deberta(config, shape):
    from transformers import DebertaConfig, DebertaForMaskedLM

    model = DebertaForMaskedLM(DebertaConfig(
        vocab_size=config["vocab_size"], hidden_size=shape.hidden_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
        max_position_embeddings=config["max_positions"], relative_attention=True, pos_att_type="c2p|p2c",
        max_relative_positions=config.get("max_relative_positions") or -1, position_biased_input=False,
        type_vocab_size=0, layer_norm_eps=config["layer_norm_epsilon"]))

    def loss(batch):
        states = model.deberta(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                               return_dict=False)[0]
        return _mlm_loss(model.cls(_gather(states, batch["mask_positions"])), batch)

    return model, loss


def _albert(config, shape):
    from transformers import AlbertForPreTraining

    model = AlbertForPreTraining(_hf_config("AlbertConfig", config, shape, embedding_size=config["embedding_size"],
                                            hidden_act="gelu_new", num_hidden_groups=1, inner_group_num=1))

    def loss(batch):
        states, pooled = model.albert(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                                      attention_mask=batch["padding_mask"], return_dict=False)[:2]
        mlm = _mlm_loss(model.predictions(_gather(states, batch["mask_positions"])), batch)
        return mlm + F.cross_entropy(model.sop_classifier(pooled).float(), batch["sop_labels"])

    return model, loss


def _electra(config, shape, generator):
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    discriminator = ElectraForPreTraining(_hf_config("ElectraConfig", config, shape,
                                                     embedding_size=config["embedding_size"]))
    hidden, heads = generator
    generator_shape = type(shape)(shape.num_layers, hidden, heads, 4 * hidden,
                                  shape.seq_len, shape.batch_size, shape.warmup, shape.steps)
    generator = ElectraForMaskedLM(_hf_config("ElectraConfig", config, generator_shape,
                                              embedding_size=config["embedding_size"]))
    # One set of embeddings, as ours: the generator's output layer stays tied to the (shared) token table.
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    model = torch.nn.ModuleDict({"generator": generator, "discriminator": discriminator})

    def loss(batch):
        states = generator.electra(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                                   attention_mask=batch["padding_mask"], return_dict=False)[0]
        logits = generator.generator_lm_head(generator.generator_predictions(_gather(states,
                                                                                     batch["mask_positions"])))
        corrupted, replaced = _replace(batch, logits)
        judged = discriminator(input_ids=corrupted, token_type_ids=batch["segment_ids"],
                               attention_mask=batch["padding_mask"]).logits
        return _mlm_loss(logits, batch) + 50.0 * _detection_loss(judged, replaced, batch)

    return model, loss


def _replace(batch, logits):
    """(corrupted ids, replaced labels): the generator's samples by Gumbel-max at temperature 1 at the masked
    positions, without gradient to the generator; a sample equal to the original is not replaced."""
    positions = batch["mask_positions"]
    with torch.no_grad():
        gumbel = -torch.log(-torch.log(torch.rand_like(logits, dtype=torch.float32).clamp(1e-9, 1.0)))
        sampled = (logits.float() + gumbel).argmax(-1)
        corrupted = batch["token_ids"].scatter(1, positions, sampled)
        replaced = torch.zeros_like(batch["token_ids"], dtype=torch.float32).scatter(
            1, positions, (sampled != batch["mask_ids"]).float())
    return corrupted, replaced


def _detection_loss(judged, replaced, batch):
    mask = batch["padding_mask"].float()
    return (F.binary_cross_entropy_with_logits(judged.float(), replaced, reduction="none") * mask).sum() / mask.sum()


def _v3_layout(config, shape, num_layers):
    """transformers' DebertaV2Config of our v3 preset at `shape`, `num_layers` deep."""
    from transformers import DebertaV2Config

    return DebertaV2Config(
        vocab_size=config["vocab_size"], hidden_size=shape.hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
        max_position_embeddings=config["max_positions"], relative_attention=True, pos_att_type="p2c|c2p",
        position_buckets=config["position_buckets"], max_relative_positions=config.get("max_relative_positions") or -1,
        share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
        layer_norm_eps=config["layer_norm_epsilon"])


def _deberta_v3_mlm(config, shape):
    from transformers import DebertaV2ForMaskedLM

    model = DebertaV2ForMaskedLM(_v3_layout(config, shape, shape.num_layers))

    def loss(batch):
        states = model.deberta(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                               return_dict=False)[0]
        return _mlm_loss(model.cls(_gather(states, batch["mask_positions"])), batch)

    return model, loss


def _deberta_v3(config, shape):
    """DeBERTa-v3's recipe: a DebertaV2ForMaskedLM generator of half depth, a DebertaV2Model discriminator
    whose word table is the generator's (detached) + its own delta (gradient-disentangled sharing), the
    head LayerNorm(h + h_CLS) -> dense -> GELU -> one logit; loss = MLM + 10 x RTD."""
    from transformers import DebertaV2ForMaskedLM, DebertaV2Model

    generator = DebertaV2ForMaskedLM(_v3_layout(config, shape, max(1, shape.num_layers // 2)))
    discriminator = DebertaV2Model(_v3_layout(config, shape, shape.num_layers))
    delta = discriminator.embeddings.word_embeddings.weight
    with torch.no_grad():
        delta.zero_()
    hidden = shape.hidden_size
    head = torch.nn.ModuleDict({"norm": torch.nn.LayerNorm(hidden, eps=config["layer_norm_epsilon"]),
                                "dense": torch.nn.Linear(hidden, hidden), "prediction": torch.nn.Linear(hidden, 1)})
    model = torch.nn.ModuleDict({"generator": generator, "discriminator": discriminator, "head": head})

    def loss(batch):
        states = generator.deberta(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                                   return_dict=False)[0]
        logits = generator.cls(_gather(states, batch["mask_positions"]))
        corrupted, replaced = _replace(batch, logits)
        table = generator.deberta.embeddings.word_embeddings.weight.detach() + delta
        judged = discriminator(inputs_embeds=F.embedding(corrupted, table), attention_mask=batch["padding_mask"],
                               return_dict=False)[0]
        judged = head["prediction"](F.gelu(head["dense"](head["norm"](judged + judged[:, :1])))).squeeze(-1)
        return _mlm_loss(logits, batch) + 10.0 * _detection_loss(judged, replaced, batch)

    return model, loss


class SpanBoundaryHead(torch.nn.Module):
    """SpanBERT's boundary objective as ours builds it: [x_left; x_right; p_offset] through two
    Dense -> GELU -> LayerNorm, then the decoder tied to the token embeddings plus a bias."""

    def __init__(self, hidden, vocab_size, token_embedding, eps, positions=32, position_width=200):
        super().__init__()
        self.position = torch.nn.Embedding(positions, position_width)
        layers = []
        for width in (2 * hidden + position_width, hidden):
            layers += [torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.LayerNorm(hidden, eps=eps)]
        self.transform = torch.nn.Sequential(*layers)
        self.token_embedding = token_embedding
        self.bias = torch.nn.Parameter(torch.zeros(vocab_size))

    def forward(self, states, left, right, offset):
        features = torch.cat([_gather(states, left), _gather(states, right), self.position(offset)], dim=-1)
        return F.linear(self.transform(features), self.token_embedding.weight, self.bias)


def _spanbert(config, shape):
    from transformers import BertForMaskedLM

    from benchmarks.peer_models import SBO_POSITION_WIDTH

    model = BertForMaskedLM(_hf_config("BertConfig", config, shape, layer_norm_eps=config["layer_norm_epsilon"]))
    boundary = SpanBoundaryHead(shape.hidden_size, config["vocab_size"], model.bert.embeddings.word_embeddings,
                                config["layer_norm_epsilon"], position_width=SBO_POSITION_WIDTH)
    module = torch.nn.ModuleDict({"bert": model, "sbo": boundary})

    def loss(batch):
        states = model.bert(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                            attention_mask=batch["padding_mask"], return_dict=False)[0]
        mlm = _mlm_loss(model.cls(_gather(states, batch["mask_positions"])), batch)
        return mlm + _mlm_loss(boundary(states, batch["span_left"], batch["span_right"], batch["span_offset"]), batch)

    return module, loss


def _xlnet(config, shape):
    from transformers import XLNetConfig, XLNetLMHeadModel

    model = XLNetLMHeadModel(XLNetConfig(
        vocab_size=config["vocab_size"], d_model=shape.hidden_size, n_layer=shape.num_layers,
        n_head=shape.num_heads, d_inner=shape.intermediate_size, ff_activation=config["activation"],
        untie_r=config["untie_r"], attn_type="bi", bi_data=False, clamp_len=config["clamp_len"], mem_len=None,
        dropout=config["dropout"], layer_norm_eps=config["layer_norm_epsilon"]))

    def loss(batch):
        logits = model(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                       attention_mask=batch["padding_mask"], perm_mask=batch["perm_mask"],
                       target_mapping=batch["target_mapping"], use_mems=False).logits
        return _mlm_loss(logits, batch, "target_ids", "target_weights")

    return model, loss


def _gpt(config, shape):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=config["vocab_size"], n_positions=config["max_positions"], n_embd=shape.hidden_size,
        n_layer=shape.num_layers, n_head=shape.num_heads, n_inner=shape.intermediate_size,
        activation_function="gelu_new", layer_norm_epsilon=config["layer_norm_epsilon"],
        attn_implementation="sdpa"))

    def loss(batch):
        logits = model(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"]).logits
        return _mlm_loss(logits, batch, "next_token_ids", "next_token_weights")

    return model, loss


def _t5(config, shape):
    from transformers import T5Config, T5ForConditionalGeneration

    model = T5ForConditionalGeneration(T5Config(
        vocab_size=config["vocab_size"], d_model=shape.hidden_size, d_kv=shape.hidden_size // shape.num_heads,
        d_ff=shape.intermediate_size, num_layers=shape.num_layers, num_heads=shape.num_heads,
        feed_forward_proj="relu", tie_word_embeddings=True, decoder_start_token_id=0, attn_implementation="eager"))

    def loss(batch):
        logits = model(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                       decoder_input_ids=batch["decoder_token_ids"],
                       decoder_attention_mask=batch["decoder_padding_mask"]).logits
        return _mlm_loss(logits, batch, "target_ids", "target_weights")

    return model, loss


def _distilbert(config, shape):
    """DistilBERT's step: a frozen BERT twice as deep runs forward; the student learns KL (T=2, over every
    real token) x 5 + MLM x 2 + the cosine of the last hidden states x 1, as Sanh et al.'s distiller."""
    from transformers import BertForPreTraining, DistilBertConfig, DistilBertForMaskedLM

    student = DistilBertForMaskedLM(DistilBertConfig(
        vocab_size=config["vocab_size"], dim=shape.hidden_size, n_layers=shape.num_layers, n_heads=shape.num_heads,
        hidden_dim=shape.intermediate_size, max_position_embeddings=config["max_positions"],
        attn_implementation="sdpa"))
    teacher = BertForPreTraining(_hf_config("BertConfig", config, teacher_shape(shape))).eval().requires_grad_(False)
    temperature = 2.0

    def loss(batch):
        real = batch["padding_mask"].bool()
        with torch.no_grad():
            taught = teacher.bert(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                                  return_dict=False)[0]
            taught_logits = teacher.cls.predictions(taught)
        states = student.distilbert(input_ids=batch["token_ids"], attention_mask=batch["padding_mask"],
                                    return_dict=False)[0]
        logits = student.vocab_projector(student.vocab_layer_norm(student.activation(student.vocab_transform(states))))
        kl = F.kl_div(F.log_softmax(logits[real].float() / temperature, -1),
                      F.softmax(taught_logits[real].float() / temperature, -1), reduction="batchmean")
        cos = 1.0 - F.cosine_similarity(states[real].float(), taught[real].float(), dim=-1).mean()
        return 5.0 * kl * temperature ** 2 + 2.0 * _mlm_loss(_gather(logits, batch["mask_positions"]), batch) + cos

    return torch.nn.ModuleDict({"student": student, "teacher": teacher}), loss


class _Highway(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.transform, self.gate = torch.nn.Linear(features, features), torch.nn.Linear(features, features)

    def forward(self, x):
        share = torch.sigmoid(self.gate(x))
        return share * F.relu(self.transform(x)) + (1.0 - share) * x


class _Elmo(torch.nn.Module):
    """ELMo's biLM as bilm-tf composes it: the character CNN (max over the word, ReLU, highways, projection),
    per direction a stack of `nn.LSTM(proj_size=...)` with a residual around every layer but the first, and
    one softmax for both directions. Every row is whole (no padding), so the backward stack reads the rows
    flipped."""

    def __init__(self, config):
        super().__init__()
        features, width = sum(count for _, count in config["filters"]), config["projection_dim"]
        self.characters = torch.nn.Embedding(config["num_characters"], config["char_embedding_dim"])
        self.convolutions = torch.nn.ModuleList(torch.nn.Conv1d(config["char_embedding_dim"], count, size)
                                                for size, count in config["filters"])
        self.highways = torch.nn.Sequential(*[_Highway(features) for _ in range(config["num_highway"])])
        self.projection = torch.nn.Linear(features, width)
        self.stacks = torch.nn.ModuleList(
            torch.nn.ModuleList(torch.nn.LSTM(width, config["lstm_units"], proj_size=width, batch_first=True)
                                for _ in range(config["num_layers"])) for _ in range(2))
        self.softmax = torch.nn.Linear(width, config["vocab_size"])

    def words(self, char_ids):
        rows, length, characters = char_ids.shape
        chars = self.characters(char_ids.reshape(-1, characters)).transpose(1, 2)  # [words, E, characters]
        x = torch.cat([F.relu(conv(chars).max(dim=-1).values) for conv in self.convolutions], dim=-1)
        return self.projection(self.highways(x)).reshape(rows, length, -1)

    def forward(self, char_ids):
        x = self.words(char_ids)
        tops = []
        for backward, stack in enumerate(self.stacks):
            states = x.flip(1) if backward else x
            for index, lstm in enumerate(stack):
                output = lstm(F.dropout(states, 0.1, self.training))[0]
                states = output if index == 0 else output + states
            tops.append(states.flip(1) if backward else states)
        return [self.softmax(top) for top in tops]


def _elmo(config, shape):
    model = _Elmo(config)

    def loss(batch):
        forward, backward = model(batch["char_ids"])
        return (_mlm_loss(forward, batch, "next_token_ids", "next_token_weights")
                + _mlm_loss(backward, batch, "previous_token_ids", "previous_token_weights"))

    return model, loss


BUILDERS = {"t5": _t5, "gpt": _gpt, "bert": _bert, "roberta": _roberta, "deberta": _deberta, "albert": _albert,
            "spanbert": _spanbert, "xlnet": _xlnet, "deberta-v3": _deberta_v3, "deberta-v3-mlm": _deberta_v3_mlm,
            "ernie": _ernie, "bigbird": _bigbird, "distilbert": _distilbert, "elmo": _elmo, "modernbert": _modernbert}


def build_torch(model, shape, precision, compiled, device="cpu"):
    """(step function, parameter count) of the transformers peer of `model` on `device` ("cpu", "cuda")."""
    torch.manual_seed(0)
    config = our_config(model, shape)
    if model.family == "electra":
        module, loss = _electra(config, shape, generator_width(model, shape))
    else:
        module, loss = BUILDERS[model.torch_peer or model.family](config, shape)
    module.to(device).train()
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4, fused=device == "cuda")
    if compiled:
        loss = torch.compile(loss)
    features = synthetic_features(model, shape, config["vocab_size"])
    tensors = {name: (torch.from_numpy(value).long() if value.dtype.kind == "i" else torch.from_numpy(value))
               .to(device) for name, value in features.items()}
    batches = [{name: value[i * shape.batch_size:(i + 1) * shape.batch_size] for name, value in tensors.items()}
               for i in range(len(features["token_ids"]) // shape.batch_size)]
    bf16 = precision == "mixed_bfloat16"

    def step(index):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            value = loss(batches[index % len(batches)])
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value.item()

    # Unique parameters: the shared ELECTRA embeddings count once, as in our model.
    return step, sum(p.numel() for p in module.parameters())


def train_torch(step, clock, steps):
    """The warm-up and timed steps; returns the GPU's peak memory when there is one."""
    for index in range(clock.warmup + steps):
        clock.begin_step(index)
        clock.end_step(step(index))
    return {"device_peak_mib": torch.cuda.max_memory_allocated() / 2 ** 20} if torch.cuda.is_available() else {}
