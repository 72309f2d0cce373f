"""accel.apply: the CPU fast paths replace modules (same tensors), give the plain modules' outputs,
and switching them off leaves plain modules."""

import copy
import pickle

import pytest
import torch
from torch import nn

from transformer import accel
from transformer.accel.attention import CPUMultiHeadAttention, MIN_MATMUL_HEADS, single_query_matmul
from transformer.decoding import beam_search, greedy_search
from transformer.models import EncoderDecoder, TransformerConfig
from transformer.models.transformer import VocabProjection
from transformer.modules.attention import MultiHeadAttention


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=40, pad_id=0, d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
               d_ff=32, dropout=0.0, max_len=64)
    cfg.update(kw)
    return EncoderDecoder(TransformerConfig(**cfg)).eval()


def _batch():
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt_in = torch.tensor([[1, 11, 12, 13], [1, 14, 0, 0]])
    return src, tgt_in


def test_apply_replaces_modules_by_type_keeping_their_tensors_and_none_undoes_it():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = dict(model.named_parameters())
    plain_proj = model.decoder.output_proj
    assert model is accel.apply(model, "cpu")
    assert type(model.decoder.output_proj) is accel.VocabProjection
    assert type(model.encoder.layers[0].self_attn) is CPUMultiHeadAttention
    assert type(model.encoder.layers[0].ffn.w_1) is accel.Linear
    assert type(model.encoder.dropout) is accel.Dropout
    assert model.decoder.output_proj is not plain_proj  # a new module, not a class swapped in place
    assert type(plain_proj) is VocabProjection
    assert model.decoder.output_proj.weight is model.decoder.embedding.weight  # still tied
    assert all(p is params[n] for n, p in model.named_parameters())  # the same Parameter objects
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    accel.apply(model, "none")
    classes = {type(m) for m in model.modules()}
    assert not classes & {CPUMultiHeadAttention, accel.Linear, accel.Dropout}
    assert type(model.encoder.layers[0].self_attn) is MultiHeadAttention
    assert type(model.decoder.output_proj) is VocabProjection
    assert all(p is params[n] for n, p in model.named_parameters())
    assert model.decoder.output_proj.weight is model.decoder.embedding.weight


def _used(model):
    # one inference pass and one training step, so every fast module has filled its caches
    src, tgt_in = _batch()
    with torch.no_grad():
        model.eval()(src, tgt_in)
        greedy_search(model, src[:1], bos_id=1, eos_id=2, pad_id=0, max_len_a=0.0, max_len_b=3)
    model.train()(src, tgt_in).sum().backward()
    return model.eval()


def test_none_after_cpu_gives_plain_modules_that_copy_pickle_and_compile():
    model = _used(accel.apply(_model(), "cpu"))
    model = accel.apply(model, "none")
    plain = {nn.Linear, nn.Dropout, MultiHeadAttention, VocabProjection}
    for m in model.modules():
        assert not hasattr(m, "_packed") and not hasattr(m, "_w_t")
        assert not type(m).__module__.startswith("transformer.accel")
    assert {type(m) for m in model.modules()} >= plain
    src, tgt_in = _batch()
    with torch.no_grad():
        ref = model(src, tgt_in)
        torch.testing.assert_close(copy.deepcopy(model)(src, tgt_in), ref)
        torch.testing.assert_close(pickle.loads(pickle.dumps(model))(src, tgt_in), ref)
        torch.testing.assert_close(torch.compile(model, backend="eager")(src, tgt_in), ref)


def test_a_used_fast_model_copies_and_its_copy_keeps_the_tied_weight():
    model = _used(accel.apply(_model(), "cpu"))
    twin = copy.deepcopy(model)
    assert twin.decoder.output_proj.weight is twin.decoder.embedding.weight
    src, tgt_in = _batch()
    with torch.no_grad():
        torch.testing.assert_close(twin(src, tgt_in), model(src, tgt_in))


def test_the_root_module_is_replaced_and_returned():
    mha = MultiHeadAttention(8, 2)
    w_q = mha.w_q
    fast = accel.apply(mha, "cpu")
    assert type(fast) is CPUMultiHeadAttention and type(mha) is MultiHeadAttention
    assert type(fast.w_q) is accel.Linear and fast.w_q.weight is w_q.weight
    back = accel.apply(fast, "none")
    assert type(back) is MultiHeadAttention and type(back.w_q) is nn.Linear


def test_unknown_backend_is_refused_and_nothing_is_chosen_for_the_user():
    for name in ("tpu", "auto", None):
        with pytest.raises(ValueError, match="expected one of none, cpu"):
            accel.apply(_model(), name)
    assert accel.check("cpu") == "cpu" and accel.check("none") == "none"


def test_teacher_forced_logits_and_gradients_equal_with_and_without_accel():
    src, tgt_in = _batch()
    plain, fast = _model(), accel.apply(_model(), "cpu")
    plain.train(), fast.train()  # dropout 0: training products take the oneDNN autograd path
    out_p, out_f = plain(src, tgt_in), fast(src, tgt_in)
    torch.testing.assert_close(out_f, out_p, atol=1e-5, rtol=1e-5)
    out_p.square().sum().backward()
    out_f.square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_equal_with_and_without_accel(search):
    torch.manual_seed(1)
    src = torch.randint(3, 40, (40, 7))  # 40 rows x 4 heads: the one-query matmul path runs
    src[5:, 5:] = 0
    src[:, 4] = 2
    plain, fast = _model(), accel.apply(_model(), "cpu")
    kw = dict(bos_id=1, eos_id=2, pad_id=0, max_len_a=0.0, max_len_b=8)
    if search == "greedy":
        assert greedy_search(fast, src, **kw) == greedy_search(plain, src, **kw)
    else:
        ours = beam_search(fast, src, beam_size=3, **kw)
        ref = beam_search(plain, src, beam_size=3, **kw)
        assert [h[0].tokens for h in ours] == [h[0].tokens for h in ref]


@pytest.mark.parametrize("rows", [1, 40])  # 4 and 160 (row, head) pairs: SDPA and the matmul path
def test_single_query_paths_agree_with_the_explicit_formula(rows):
    # Incremental decoding: one query per row over strided cached keys, with an additive source
    # bias; whichever kernel runs, the result is softmax(q kᵀ / √d + bias) v.
    torch.manual_seed(0)
    mha = accel.apply(MultiHeadAttention(16, 4).eval(), "cpu")
    q = torch.randn(rows, 4, 1, 4)
    buf_k, buf_v = torch.randn(rows, 4, 9, 4), torch.randn(rows, 4, 9, 4)
    k, v = buf_k[:, :, :6], buf_v[:, :, :6]  # views into a larger buffer, as the KV cache has
    bias = torch.zeros(rows, 1, 1, 6)
    bias[0, ..., 4:] = float("-inf")
    assert single_query_matmul(q) == (rows * 4 >= MIN_MATMUL_HEADS)
    out, _ = mha.attend(q, k, v, attn_bias=bias)
    ref, _ = mha.attend(q, k, v, attn_bias=bias, need_weights=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    k2 = k.clone()
    k2[0, :, 4:] = 100.0  # masked keys have no influence
    torch.testing.assert_close(mha.attend(q, k2, v, attn_bias=bias)[0][0], out[0], atol=1e-5, rtol=0)


def test_an_all_true_mask_is_dropped_and_a_padding_mask_kept():
    torch.manual_seed(0)
    mha = accel.apply(MultiHeadAttention(8, 2).eval(), "cpu")
    plain = accel.apply(MultiHeadAttention(8, 2).eval(), "none")
    plain.load_state_dict(mha.state_dict())
    x = torch.randn(2, 5, 8)
    real = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    torch.testing.assert_close(mha(x, x, x, real)[0], plain(x, x, x)[0], atol=1e-6, rtol=0)
    padded = real.clone()
    padded[1, ..., 3:] = False
    torch.testing.assert_close(mha(x, x, x, padded)[0], plain(x, x, x, padded)[0], atol=1e-6, rtol=0)
    assert not torch.allclose(mha(x, x, x, padded)[0][1], plain(x, x, x)[0][1], atol=1e-4)


@pytest.mark.parametrize("window", [2, None])
def test_a_long_source_with_a_local_window_gives_the_plain_logits(window):
    # 300 positions: the window runs block by block (modules.attention.LocalWindow) in both models.
    src = torch.randint(3, 40, (2, 300))
    src[1, 200:] = 0
    tgt_in = torch.tensor([[1, 11, 12, 13], [1, 14, 0, 0]])
    plain, fast = _model(window=window, max_len=512), accel.apply(_model(window=window, max_len=512), "cpu")
    torch.testing.assert_close(fast(src, tgt_in), plain(src, tgt_in), atol=1e-5, rtol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(fast(src, tgt_in), plain(src, tgt_in), atol=1e-5, rtol=1e-5)
