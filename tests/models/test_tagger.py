"""Tagger: per-word pooling of subword pieces."""

import pytest
import torch
from tiny_models import TINY

from transformer.models import Tagger, TaggerConfig
from transformer.models.tagger import pool_words

WORD_IDS = torch.tensor([[0, 0, 1, -1, -1], [-1, 0, 1, 1, 2]])  # -1: pad / specials


def tagger(vocab_size: int, n_tags: int, **kw) -> Tagger:
    """A tagger over ``vocab_size`` pieces (0 = padding) with ``n_tags`` tags."""
    return Tagger(TaggerConfig(vocab_size=vocab_size, n_tags=n_tags, pad_id=0, **kw))


def test_pool_first_and_mean_on_crafted_word_ids():
    h = torch.arange(10.0).view(2, 5, 1)  # piece t of row b has value 5b + t
    first = pool_words(h, WORD_IDS, "first")
    mean = pool_words(h, WORD_IDS, "mean")
    assert first.shape == mean.shape == (2, 3, 1)
    assert first[..., 0].tolist() == [[0.0, 2.0, 0.0], [6.0, 7.0, 9.0]]  # row 0 has no word 2
    assert mean[..., 0].tolist() == [[0.5, 2.0, 0.0], [6.0, 7.5, 9.0]]


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_tagger_output_shape(pooling):
    m = tagger(20, 7, n_layers=1, pooling=pooling, **TINY).eval()
    src = torch.tensor([[2, 5, 6, 3, 0], [2, 5, 6, 7, 8]])
    logits = m(src, WORD_IDS)
    assert logits.shape == (2, 3, 7)


def test_pooling_choice_changes_multi_piece_words_only():
    torch.manual_seed(0)
    first = tagger(20, 7, n_layers=1, pooling="first", **TINY).eval()
    mean = tagger(20, 7, n_layers=1, pooling="mean", **TINY).eval()
    mean.load_state_dict(first.state_dict())
    src = torch.tensor([[2, 5, 6, 3, 0], [2, 5, 6, 7, 8]])
    a, b = first(src, WORD_IDS), mean(src, WORD_IDS)
    torch.testing.assert_close(a[1, 0], b[1, 0])  # single-piece word
    assert not torch.allclose(a[1, 1], b[1, 1], atol=1e-4)  # two-piece word


# ----------------------------------------------------------------- character word encoder
PIECES = [None, None, None, None, "ab", "c", "Ġxyz", "Q"]  # ids 0-3 special, as in the tokenizer


def _table(max_piece_chars=4):
    from transformer.models.tagger import CharWordEncoder

    enc = CharWordEncoder(vocab_size=len(PIECES), d_model=8, max_piece_chars=max_piece_chars, max_word_chars=3)
    enc.set_pieces(PIECES)
    return enc


def test_words_are_spelled_from_their_pieces_in_order():
    from transformer.models.tagger import char_id, spell_words

    enc = _table()
    src = torch.tensor([[4, 5, 6, 0], [7, 4, 4, 0]])
    word_ids = torch.tensor([[0, 0, 1, -1], [0, 1, 1, -1]])
    spelled = spell_words(enc.piece_chars, src, word_ids, max_word_chars=5)  # (B, W, 5)
    ids = lambda text: [char_id(c) for c in text] + [0] * (5 - len(text))  # noqa: E731
    assert spelled[0].tolist() == [ids("abc"), ids("Ġxyz")]
    assert spelled[1].tolist() == [ids("Q"), ids("abab")]
    # a word longer than the cap keeps its first characters; padding and specials spell nothing
    assert spell_words(enc.piece_chars, src, word_ids, 3)[0, 1].tolist() == [char_id(c) for c in "Ġxy"]
    assert spell_words(enc.piece_chars, torch.tensor([[3, 4]]), torch.tensor([[0, 1]]), 3)[0, 0].eq(0).all()


def test_tagger_reads_the_spelling_and_ignores_padding():
    torch.manual_seed(0)
    m = tagger(len(PIECES), 5, n_layers=1, pooling="mean", char_channels=6, char_dim=4, **TINY).eval()
    m.set_pieces(PIECES, {0, 1, 2, 3})
    src = torch.tensor([[4, 5, 6]])
    word_ids = torch.tensor([[0, 0, 1]])
    base = m(src, word_ids)
    padded = m(torch.tensor([[4, 5, 6, 0, 0]]), torch.tensor([[0, 0, 1, -1, -1]]))
    torch.testing.assert_close(padded, base, atol=1e-5, rtol=0)
    # Same piece embeddings, another spelling for piece 6: the word's scores change.
    m.set_pieces(PIECES[:6] + ["Ġxyw", "Q"], {0, 1, 2, 3})
    assert not torch.allclose(m(src, word_ids)[0, 1], base[0, 1], atol=1e-4)
    # The table is part of the weights, so a checkpoint restores it.
    again = tagger(len(PIECES), 5, n_layers=1, pooling="mean", char_channels=6, char_dim=4, **TINY).eval()
    again.load_state_dict(m.state_dict())
    torch.testing.assert_close(again(src, word_ids), m(src, word_ids))


# ----------------------------------------------------------------- word-level context
def _pair(window):
    """The same weights with the encoder over pieces and over words."""
    torch.manual_seed(0)
    kw = dict(n_layers=1, pooling="mean", window=window, **TINY)
    piece = tagger(20, 5, context="piece", **kw).eval()
    word = tagger(20, 5, context="word", **kw).eval()
    word.load_state_dict(piece.state_dict())
    return piece, word


def test_word_context_windows_and_positions_count_words():
    piece, word = _pair(window=1)
    src = torch.tensor([[5, 6, 7, 8, 9]])
    word_ids = torch.tensor([[0, 0, 0, 1, 2]])  # a three-piece word, then two one-piece words
    changed = src.clone()
    changed[0, 0] = 11  # the first piece of word 0
    # Over words, word 1's window (+-1 word) holds all of word 0; over pieces it holds only
    # word 0's last piece, so the change reaches word 1 only in the word context.
    assert not torch.allclose(word(changed, word_ids)[0, 1], word(src, word_ids)[0, 1], atol=1e-4)
    torch.testing.assert_close(piece(changed, word_ids)[0, 1], piece(src, word_ids)[0, 1])
    # Word 2 is two words from word 0: outside the window in the word context as well.
    torch.testing.assert_close(word(changed, word_ids)[0, 2], word(src, word_ids)[0, 2])


def test_word_context_ignores_padding_and_specials():
    torch.manual_seed(0)
    m = tagger(len(PIECES), 5, n_layers=2, pooling="mean", context="word", char_channels=6, char_dim=4,
               **TINY).eval()
    m.set_pieces(PIECES, {0, 1, 2, 3})
    base = m(torch.tensor([[4, 5, 6]]), torch.tensor([[0, 0, 1]]))
    batch = m(torch.tensor([[2, 4, 5, 6, 0, 0], [2, 7, 4, 4, 6, 5]]),  # BOS-like special, padding
              torch.tensor([[-1, 0, 0, 1, -1, -1], [-1, 0, 1, 2, 3, 3]]))
    assert batch.shape == (2, 4, 5)
    torch.testing.assert_close(batch[0, :2], base[0], atol=1e-5, rtol=0)


def test_unknown_context_is_refused():
    with pytest.raises(ValueError, match="context"):
        tagger(20, 5, context="sentence", **TINY)


def test_boundaries_frame_each_spelling_and_leave_padding_empty():
    from transformer.models.tagger import BOW_ID, EOW_ID, add_boundaries, char_id

    a, b = char_id("a"), char_id("b")
    chars = torch.tensor([[[a, b, 0], [a, 0, 0], [0, 0, 0], [a, b, a]]])  # (1, W=4, L=3)
    framed = add_boundaries(chars)
    assert framed.tolist() == [[[BOW_ID, a, b, EOW_ID, 0], [BOW_ID, a, EOW_ID, 0, 0], [0] * 5,
                                [BOW_ID, a, b, a, EOW_ID]]]
    assert {BOW_ID, EOW_ID}.isdisjoint(char_id(chr(c)) for c in range(0x3000))  # markers never spell


def test_boundaries_tell_a_suffix_from_the_same_letters_inside_a_word():
    # One width-2 filter that fires only on "d" + end-of-word: with markers "ed" at the end and
    # "ed" in the middle of a word give different vectors; without them, the same.
    from transformer.models.tagger import EOW_ID, CharWordEncoder, char_id

    pieces = [None, None, None, None, "walked", "edge"]
    out = {}
    for framed in (False, True):
        enc = CharWordEncoder(len(pieces), d_model=1, char_dim=2, channels=1, kernel=2, boundaries=framed)
        enc.set_pieces(pieces, {0, 1, 2, 3})
        with torch.no_grad():
            enc.embed.weight.zero_()
            enc.embed.weight[char_id("d"), 0] = 1.0
            enc.embed.weight[EOW_ID, 1] = 1.0
            enc.convs[0].weight.zero_()
            enc.convs[0].bias.fill_(-1.5)
            enc.convs[0].weight[0, 0, 0] = 1.0  # "d" at the first tap
            enc.convs[0].weight[0, 1, 1] = 1.0  # end marker at the second tap
            enc.proj.weight.fill_(1.0)
            enc.proj.bias.zero_()
        out[framed] = enc(torch.tensor([[4, 5]]), torch.tensor([[0, 1]]))[0, :, 0].tolist()  # (W,)
    assert out[False] == [0.0, 0.0]
    assert out[True][0] > 0.0 and out[True][1] == 0.0


def test_several_widths_concatenate_each_widths_pooled_filters():
    # Kernel (2, 3) with the width-3 block's projection zeroed gives exactly the width-2
    # encoder with the same weights; unzeroed, the width-3 filters change the vector.
    from transformer.models.tagger import CharWordEncoder

    pieces = [None, None, None, None, "walked", "edge"]
    torch.manual_seed(0)
    one = CharWordEncoder(len(pieces), d_model=3, char_dim=4, channels=5, kernel=2)
    two = CharWordEncoder(len(pieces), d_model=3, char_dim=4, channels=5, kernel=[2, 3])
    assert two.proj.in_features == 10
    for enc in (one, two):
        enc.set_pieces(pieces, {0, 1, 2, 3})
    src, word_ids = torch.tensor([[4, 5]]), torch.tensor([[0, 1]])
    with torch.no_grad():
        two.embed.weight.copy_(one.embed.weight)
        two.convs[0].load_state_dict(one.convs[0].state_dict())
        two.proj.weight.zero_()
        two.proj.weight[:, :5] = one.proj.weight
        two.proj.bias.copy_(one.proj.bias)
        torch.testing.assert_close(two(src, word_ids), one(src, word_ids))
        two.proj.weight[:, 5:] = 1.0
        assert not torch.allclose(two(src, word_ids), one(src, word_ids))
    with pytest.raises(ValueError, match="kernel"):
        CharWordEncoder(len(pieces), d_model=3, kernel=[])


@pytest.mark.parametrize("boundaries", [False, True])
def test_each_distinct_spelling_is_encoded_once_with_the_same_vectors_and_gradients(boundaries):
    # Row 0 repeats "ab" and "c" (ids 4, 5) and row 1 is padded to row 0's word count: the
    # convolutions see one row per distinct spelling ("ab", "c", "xyz", "Q" and the empty one),
    # and every word slot gets what encoding that word alone gives, gradients included.
    from transformer.models.tagger import CharWordEncoder

    torch.manual_seed(0)
    enc = CharWordEncoder(len(PIECES), d_model=3, char_dim=4, channels=5, kernel=[2, 3], boundaries=boundaries)
    enc.set_pieces(PIECES, {0, 1, 2, 3})
    src = torch.tensor([[4, 5, 4, 6, 5], [7, 6, 0, 0, 0]])
    word_ids = torch.tensor([[0, 1, 2, 3, 4], [0, 1, -1, -1, -1]])
    rows = []
    hook = enc.convs[0].register_forward_hook(lambda mod, args, out: rows.append(args[0].size(0)))
    out = enc(src, word_ids)  # (2, 5, 3)
    hook.remove()
    assert out.shape == (2, 5, 3) and rows == [5]
    weights = torch.randn(2, 5, 3)
    (out * weights).sum().backward()
    batched = [p.grad.clone() for p in enc.parameters()]
    enc.zero_grad()
    alone = torch.zeros(2, 5, 3)
    for b in range(2):
        for w in range(5):
            pieces = src[b][word_ids[b] == w]
            if pieces.numel():  # a padding slot spells nothing: its vector is proj(0) = the bias
                one = enc(pieces.view(1, -1), torch.zeros(1, pieces.numel(), dtype=torch.long))[0, 0]
            else:
                one = enc.proj(torch.zeros(enc.proj.in_features))
            alone[b, w] = one.detach()
            (one * weights[b, w]).sum().backward()
    torch.testing.assert_close(out.detach(), alone)
    for got, want in zip(batched, (p.grad for p in enc.parameters())):
        torch.testing.assert_close(got, want)
    # no word at all: an empty (B, 0, D) result, no error
    assert enc(torch.zeros(2, 3, dtype=torch.long), torch.full((2, 3), -1)).shape == (2, 0, 3)


def test_checkpoints_naming_the_single_convolution_conv_still_load():
    from transformer.models.tagger import CharWordEncoder

    torch.manual_seed(0)
    enc = CharWordEncoder(6, d_model=3, char_dim=4, channels=5, kernel=3)
    old = {k.replace("convs.0.", "conv."): v for k, v in enc.state_dict().items()}
    assert "conv.weight" in old
    again = CharWordEncoder(6, d_model=3, char_dim=4, channels=5, kernel=3)
    again.load_state_dict(old)
    torch.testing.assert_close(again.convs[0].weight, enc.convs[0].weight)


@pytest.mark.parametrize("context", ["piece", "word"])
def test_spelling_can_come_from_other_pieces_than_the_embedded_ones(context):
    # ``spell`` feeds only the character encoder: hiding a word's pieces (<unk> = 3) but
    # spelling the real ones differs from hiding both, and spell=src is the default.
    torch.manual_seed(0)
    m = tagger(len(PIECES), 5, n_layers=1, pooling="mean", char_channels=6, char_dim=4, context=context,
               **TINY).eval()
    m.set_pieces(PIECES, {0, 1, 2, 3})
    src, word_ids = torch.tensor([[4, 5, 6]]), torch.tensor([[0, 0, 1]])
    hidden = torch.tensor([[4, 5, 3]])
    torch.testing.assert_close(m(src, word_ids, src), m(src, word_ids))
    assert not torch.allclose(m(hidden, word_ids, src)[0, 1], m(hidden, word_ids)[0, 1], atol=1e-4)
    # a model without a character encoder has nothing to spell with
    plain = tagger(len(PIECES), 5, n_layers=1, context=context, **TINY).eval()
    torch.testing.assert_close(plain(hidden, word_ids, src), plain(hidden, word_ids))
