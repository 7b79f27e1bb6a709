"""Independent NumPy (float64) reference for Transformer-XL (attn_type 0, post-LN, eval mode).

Written from the paper and kimiyoung/transformer-xl pytorch/mem_transformer.py +
pytorch/utils/proj_adaptive_softmax.py; parameter names follow the transformers 4.x
``TransfoXLLMHeadModel`` state dict.  Layouts are torch ``Linear`` ([out, in]).
Deliberate choices (the original PyTorch code, not HF/TF where they differ):
  * cluster i of the adaptive softmax reads head column ``-i`` (TF and HF 4.x ``forward``
    read ``cutoffs[0] + i - 1`` instead; identical only with a single cluster);
  * ``mems=None`` means no memory (HF 4.x instead starts from ``mem_len`` zero vectors);
  * n_layer + 1 memories (embedding output + every layer output; HF keeps n_layer).
"""
import numpy as np


def _ends(config):
    return [0] + list(config.get("cutoffs") or []) + [config["vocab_size"]]


def random_state_dict(config, seed=0, scale=0.5):
    """Random float32 weights under the HF 4.x TransfoXLLMHeadModel state-dict keys/shapes."""
    rng = np.random.default_rng(seed)
    mat = lambda *s: rng.normal(0.0, scale, s).astype(np.float32)
    ln_w = lambda n: (1.0 + rng.normal(0.0, 0.2, n)).astype(np.float32)
    ln_b = lambda n: rng.normal(0.0, 0.2, n).astype(np.float32)
    V, D, E, dv = config["vocab_size"], config["d_model"], config["d_embed"], config["div_val"]
    H, Dh, F, ends = config["n_head"], config["d_head"], config["d_inner"], _ends(config)
    ncl = len(ends) - 2
    tie_w = config.get("tie_weight", config.get("tie_word_embeddings", True))
    tie_p = list(config.get("tie_projs", [False] + [True] * ncl))
    sd, t = {}, "transformer."
    # AdaptiveEmbedding: one table (+ optional projection) for div_val 1, else one per cluster.
    if dv == 1:
        sd[t + "word_emb.emb_layers.0.weight"] = mat(V, E)
        if D != E:
            sd[t + "word_emb.emb_projs.0"] = mat(D, E)
    else:
        for i in range(ncl + 1):
            sd[t + f"word_emb.emb_layers.{i}.weight"] = mat(ends[i + 1] - ends[i], E // dv ** i)
            sd[t + f"word_emb.emb_projs.{i}"] = mat(D, E // dv ** i)
    if not config.get("untie_r", False):
        sd[t + "r_w_bias"], sd[t + "r_r_bias"] = mat(H, Dh), mat(H, Dh)
    for l in range(config["n_layer"]):
        p = f"{t}layers.{l}."
        # With untie_r False HF registers the shared Parameter in every layer too: same array.
        sd[p + "dec_attn.r_r_bias"] = mat(H, Dh) if config.get("untie_r", False) else sd[t + "r_r_bias"]
        sd[p + "dec_attn.r_w_bias"] = mat(H, Dh) if config.get("untie_r", False) else sd[t + "r_w_bias"]
        sd[p + "dec_attn.qkv_net.weight"] = mat(3 * H * Dh, D)
        sd[p + "dec_attn.o_net.weight"] = mat(D, H * Dh)
        sd[p + "dec_attn.layer_norm.weight"], sd[p + "dec_attn.layer_norm.bias"] = ln_w(D), ln_b(D)
        sd[p + "dec_attn.r_net.weight"] = mat(H * Dh, D)
        sd[p + "pos_ff.CoreNet.0.weight"], sd[p + "pos_ff.CoreNet.0.bias"] = mat(F, D), mat(F)
        sd[p + "pos_ff.CoreNet.3.weight"], sd[p + "pos_ff.CoreNet.3.bias"] = mat(D, F), mat(D)
        sd[p + "pos_ff.layer_norm.weight"], sd[p + "pos_ff.layer_norm.bias"] = ln_w(D), ln_b(D)
    sd[t + "pos_emb.inv_freq"] = (1.0 / 10000 ** (np.arange(0.0, D, 2.0) / D)).astype(np.float32)
    # ProjectedAdaptiveLogSoftmax (+ tie_weight / tie_projs as in TransfoXLLMHeadModel.tie_weights).
    if ncl > 0:
        sd["crit.cluster_weight"], sd["crit.cluster_bias"] = mat(ncl, E), mat(ncl)
    for i in range(ncl + 1 if dv != 1 else 1):
        emb = sd[t + f"word_emb.emb_layers.{i}.weight"]
        sd[f"crit.out_layers.{i}.weight"] = emb if tie_w else mat(*emb.shape)
        sd[f"crit.out_layers.{i}.bias"] = mat(emb.shape[0])
    for i in range(ncl + 1):
        if dv == 1 and D == E:
            continue  # out_projs[i] is None -> absent from the state dict
        src = t + ("word_emb.emb_projs.0" if dv == 1 else f"word_emb.emb_projs.{i}")
        sd[f"crit.out_projs.{i}"] = sd[src] if tie_p[i] else mat(*sd[src].shape)
    return sd


def _w(state, key):
    return np.asarray(state[key], dtype=np.float64)


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def adaptive_embedding(config, state, ids):
    """AdaptiveEmbedding.forward: per-cluster lookup, F.linear(emb, proj) (= emb @ proj.T), * sqrt(d_model)."""
    D, E, dv, ends = config["d_model"], config["d_embed"], config["div_val"], _ends(config)
    flat = np.asarray(ids).reshape(-1)
    pre = "transformer.word_emb."
    if dv == 1:
        out = _w(state, pre + "emb_layers.0.weight")[flat]
        if D != E:
            out = out @ _w(state, pre + "emb_projs.0").T
    else:
        out = np.zeros((flat.size, D))
        for i in range(len(ends) - 1):
            m = (flat >= ends[i]) & (flat < ends[i + 1])
            if m.any():
                e = _w(state, pre + f"emb_layers.{i}.weight")[flat[m] - ends[i]]
                out[m] = e @ _w(state, pre + f"emb_projs.{i}").T
    return out.reshape(np.shape(ids) + (D,)) * D ** 0.5


def rel_shift(x):
    """RelMultiHeadAttn._rel_shift, literally: x [qlen, klen, ...] -> pad left zero column,
    view [klen+1, qlen, ...], drop first row, view back to [qlen, klen, ...]."""
    q, k = x.shape[:2]
    padded = np.concatenate([np.zeros((q, 1) + x.shape[2:]), x], axis=1)
    padded = padded.reshape((k + 1, q) + x.shape[2:])
    return padded[1:].reshape(x.shape)


def rel_attention(config, state, l, w, r, mask, mem):
    """RelPartialLearnableMultiHeadAttn.forward (post-LN). w [qlen,B,D], r [rlen,D], mem [mlen,B,D] or None."""
    H, Dh, eps = config["n_head"], config["d_head"], config.get("layer_norm_epsilon", 1e-5)
    p = f"transformer.layers.{l}.dec_attn."
    bias_p = p if config.get("untie_r", False) else "transformer."
    qlen, bsz = w.shape[:2]
    cat = w if mem is None else np.concatenate([mem, w], axis=0)
    heads = cat @ _w(state, p + "qkv_net.weight").T
    q, k, v = np.split(heads, 3, axis=-1)
    q = q[-qlen:]
    klen, rlen = k.shape[0], r.shape[0]
    q = q.reshape(qlen, bsz, H, Dh)
    k, v = k.reshape(klen, bsz, H, Dh), v.reshape(klen, bsz, H, Dh)
    rk = (r @ _w(state, p + "r_net.weight").T).reshape(rlen, H, Dh)
    AC = np.einsum("ibnd,jbnd->ijbn", q + _w(state, bias_p + "r_w_bias"), k)
    BD = rel_shift(np.einsum("ibnd,jnd->ijbn", q + _w(state, bias_p + "r_r_bias"), rk))
    score = (AC + BD) * (1.0 / Dh ** 0.5)
    score = np.where(mask[:, :, None, None], -np.inf, score)
    prob = np.exp(score - score.max(1, keepdims=True))
    prob = prob / prob.sum(1, keepdims=True)  # softmax over keys (dim 1)
    vec = np.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, bsz, H * Dh)
    out = vec @ _w(state, p + "o_net.weight").T
    return _layer_norm(w + out, _w(state, p + "layer_norm.weight"), _w(state, p + "layer_norm.bias"), eps)


def pos_ff(config, state, l, x):
    """PositionwiseFF.forward (post-LN): LN(x + W3 relu(W0 x + b0) + b3)."""
    p, eps = f"transformer.layers.{l}.pos_ff.", config.get("layer_norm_epsilon", 1e-5)
    h = np.maximum(x @ _w(state, p + "CoreNet.0.weight").T + _w(state, p + "CoreNet.0.bias"), 0.0)
    h = h @ _w(state, p + "CoreNet.3.weight").T + _w(state, p + "CoreNet.3.bias")
    return _layer_norm(x + h, _w(state, p + "layer_norm.weight"), _w(state, p + "layer_norm.bias"), eps)


def adaptive_log_probs(config, state, hidden):
    """Full-vocabulary log-probs as ProjectedAdaptiveLogSoftmax computes them (original pytorch):
    head = [shortlist | cluster logits], tail i adds head column -i. hidden [N, d_model]."""
    ends, dv = _ends(config), config["div_val"]
    ncl = len(ends) - 2

    def logit(i, extra_w=None, extra_b=None):
        if dv == 1:
            W = _w(state, "crit.out_layers.0.weight")[ends[i]:ends[i + 1]]
            b = _w(state, "crit.out_layers.0.bias")[ends[i]:ends[i + 1]]
        else:
            W, b = _w(state, f"crit.out_layers.{i}.weight"), _w(state, f"crit.out_layers.{i}.bias")
        if extra_w is not None:
            W, b = np.concatenate([W, extra_w], 0), np.concatenate([b, extra_b], 0)
        h = hidden
        if f"crit.out_projs.{i}" in state:  # _compute_logit: F.linear(h, proj.t()) == h @ proj
            h = h @ _w(state, f"crit.out_projs.{i}")
        return h @ W.T + b

    if ncl == 0:
        return _log_softmax(logit(0))
    head = _log_softmax(logit(0, _w(state, "crit.cluster_weight"), _w(state, "crit.cluster_bias")))
    out = np.empty((hidden.shape[0], config["vocab_size"]))
    out[:, :ends[1]] = head[:, :ends[1]]
    for i in range(1, ncl + 1):
        out[:, ends[i]:ends[i + 1]] = head[:, -i][:, None] + _log_softmax(logit(i))
    return out


def forward(config, state, token_ids, mems=None, same_length=False, clamp_len=None, mem_len=None):
    """MemTransformerLM._forward + _update_mems + crit, eval mode. token_ids [B, L]; mems: None or
    n_layer+1 arrays [B, M, d_model]. ``same_length`` is taken from the argument only (config's is not read)."""
    if config.get("pre_lnorm", False):
        raise NotImplementedError("pre_lnorm=True is not supported by the reference")
    mem_len = config["mem_len"] if mem_len is None else mem_len
    clamp_len = config["clamp_len"] if clamp_len is None else clamp_len
    ids = np.asarray(token_ids).T  # time-major [qlen, B]
    qlen, bsz = ids.shape
    D = config["d_model"]
    mems_t = None if mems is None else [np.asarray(m, np.float64).transpose(1, 0, 2) for m in mems]
    mlen = 0 if mems_t is None else mems_t[0].shape[0]
    klen = mlen + qlen
    ones = np.ones((qlen, klen))
    if same_length:
        mask_len = klen - mem_len
        mask_shift_len = qlen - mask_len if mask_len > 0 else qlen
        mask = (np.triu(ones, 1 + mlen) + np.tril(ones, -mask_shift_len)) > 0
    else:
        mask = np.triu(ones, 1 + mlen) > 0
    pos_seq = np.arange(klen - 1, -1, -1.0)
    if clamp_len > 0:
        pos_seq = np.minimum(pos_seq, clamp_len)
    inv_freq = 1.0 / 10000 ** (np.arange(0.0, D, 2.0) / D)
    sinusoid = np.outer(pos_seq, inv_freq)
    r = np.concatenate([np.sin(sinusoid), np.cos(sinusoid)], axis=-1)  # [klen, D], not interleaved
    core = adaptive_embedding(config, state, ids)
    hids = [core]
    for l in range(config["n_layer"]):
        core = rel_attention(config, state, l, core, r, mask, None if mems_t is None else mems_t[l])
        core = pos_ff(config, state, l, core)
        hids.append(core)
    new_mems = None
    if mem_len > 0:
        new_mems = []
        for i, h in enumerate(hids):
            cat = h if mems_t is None else np.concatenate([mems_t[i], h], axis=0)
            new_mems.append(cat[max(0, cat.shape[0] - mem_len):].transpose(1, 0, 2))
    hidden = core.transpose(1, 0, 2)  # [B, L, D]
    lp = adaptive_log_probs(config, state, hidden.reshape(-1, D)).reshape(bsz, qlen, -1)
    return {"hidden": hidden, "log_probs": lp, "new_mems": new_mems}


if __name__ == "__main__":
    base = dict(vocab_size=50, d_model=16, n_head=2, d_head=5, d_inner=24, n_layer=2, mem_len=6,
                clamp_len=0, same_length=False, layer_norm_epsilon=1e-5, pre_lnorm=False)
    cfgs = {
        "div2": dict(base, cutoffs=[10, 30], d_embed=16, div_val=2, untie_r=False, tie_projs=[False, True, True]),
        "flat": dict(base, cutoffs=[], d_embed=16, div_val=1, untie_r=True, tie_projs=[False]),
        "div1proj": dict(base, cutoffs=[10, 30], d_embed=12, div_val=1, untie_r=False, tie_projs=[False, True, False]),
    }
    print("state dict of 'div2':")
    for k, v in random_state_dict(cfgs["div2"]).items():
        print(f"  {k} {list(v.shape)}")
    rng, ok_all = np.random.default_rng(1), True
    for name, cfg in cfgs.items():
        sd = random_state_dict(cfg, seed=3)
        A, B = rng.integers(0, 50, (2, 5)), rng.integers(0, 50, (2, 4))
        full = forward(cfg, sd, np.concatenate([A, B], 1), mem_len=8)
        s1 = np.abs(np.exp(full["log_probs"]).sum(-1) - 1).max()
        for sl, cl in [(False, 0), (False, 3), (True, 0)]:
            ml = 6 if sl else 8  # same_length: windows of 6 keys, memory still holds all of A
            fa = forward(cfg, sd, np.concatenate([A, B], 1), same_length=sl, clamp_len=cl, mem_len=ml)
            a = forward(cfg, sd, A, same_length=sl, clamp_len=cl, mem_len=max(ml, 5))
            b = forward(cfg, sd, B, mems=a["new_mems"], same_length=sl, clamp_len=cl, mem_len=ml)
            d2 = np.abs(b["log_probs"] - fa["log_probs"][:, 5:]).max()
            ok = s1 < 1e-12 and d2 < 1e-9 and np.isfinite(fa["log_probs"]).all()
            ok_all &= ok
            print(f"[{name}] sum-to-1 err {s1:.1e}; recurrence same_length={sl} clamp={cl}: "
                  f"max diff {d2:.1e} -> {'PASS' if ok else 'FAIL'}")
        assert len(full["new_mems"]) == cfg["n_layer"] + 1 and full["new_mems"][0].shape == (2, 8, 16)
    # rel_shift: fed distances klen-1..0, cell (i, j) holds mlen + i - j in the causal region.
    mlen, q = 3, 4
    x = np.tile(np.arange(mlen + q - 1, -1, -1.0), (q, 1))
    sh = rel_shift(x)
    okr = all(sh[i, j] == mlen + i - j for i in range(q) for j in range(mlen + i + 1))
    print(f"rel_shift distance layout -> {'PASS' if okr else 'FAIL'}")
    ok_all &= okr
    try:
        import torch
    except ImportError:
        torch = None
        print("torch not importable: AdaptiveLogSoftmaxWithLoss comparison SKIPPED")
    if torch is not None:
        cfg = dict(base, cutoffs=[10, 30], d_embed=16, div_val=1, untie_r=False, tie_projs=[False] * 3)
        sd = dict(random_state_dict(cfg, seed=5))
        bias = sd["crit.out_layers.0.bias"].copy()
        bias[10:] = 0.0  # torch tails have no bias
        sd["crit.out_layers.0.bias"] = bias
        W = sd["crit.out_layers.0.weight"].astype(np.float64)
        ref = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 50, [10, 30], div_value=1.0, head_bias=True).double()
        with torch.no_grad():
            cw, cb = sd["crit.cluster_weight"][::-1].copy(), sd["crit.cluster_bias"][::-1].copy()
            ref.head.weight.copy_(torch.from_numpy(np.concatenate([W[:10], cw])))
            ref.head.bias.copy_(torch.from_numpy(np.concatenate([bias[:10], cb]).astype(np.float64)))
            for t, (lo, hi) in enumerate([(10, 30), (30, 50)]):
                ref.tail[t][0].weight.copy_(torch.eye(16, dtype=torch.float64))
                ref.tail[t][1].weight.copy_(torch.from_numpy(W[lo:hi]))
            h = np.random.default_rng(2).normal(0, 1, (7, 16))
            tl = ref.log_prob(torch.from_numpy(h)).numpy()
        d3 = np.abs(adaptive_log_probs(cfg, sd, h) - tl).max()
        ok3 = d3 < 1e-9
        ok_all &= ok3
        print(f"vs torch AdaptiveLogSoftmaxWithLoss (cluster rows reversed): max diff {d3:.1e} -> "
              f"{'PASS' if ok3 else 'FAIL'}")
    print("ALL PASS" if ok_all else "SOME CHECK FAILED")
