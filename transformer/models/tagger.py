"""Sequence tagging (POS, chunking) with a Transformer encoder over subword pieces.

Shape legend: B batch, T pieces, W words (max in batch), D = d_model, C tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.models.transformer import EncoderConfig, InputHook, TransformerEncoder, hp, init_weights
from transformer.modules.attention import pad_mask
from transformer.ranges import Range

POOLINGS = ("first", "mean")
# What the encoder attends over: subword pieces (then pooled per word) or words (pieces'
# embeddings pooled first, so attention and positions count words).
CONTEXTS = ("piece", "word")
# Character ids: 0 = padding, 1..N_CHAR_IDS-3 = a character's code point folded into that range
# (byte-level BPE pieces spell bytes with code points below 324, so they never collide), and
# the last two mark a word's beginning and end (CharWordEncoder(boundaries=True)).
N_CHAR_IDS = 512
BOW_ID = N_CHAR_IDS - 2
EOW_ID = N_CHAR_IDS - 1


def char_id(ch: str) -> int:
    """The id of one character of a piece string (never 0, which is padding, nor a marker)."""
    return 1 + ord(ch) % (N_CHAR_IDS - 3)


def add_boundaries(chars: Tensor) -> Tensor:
    """``(..., L)`` left-aligned character ids -> ``(..., L + 2)`` with ``BOW_ID`` before and
    ``EOW_ID`` after each spelling; an empty spelling (padding) stays empty."""
    n = chars.ne(0).sum(-1, keepdim=True)  # (..., 1) characters per word
    out = F.pad(chars, (1, 1))  # (..., L + 2), shifted right by one
    has = n.gt(0)  # (..., 1)
    out[..., :1] = torch.where(has, torch.full_like(n, BOW_ID), out[..., :1])
    return out.scatter(-1, n + 1, torch.where(has, torch.full_like(n, EOW_ID), torch.zeros_like(n)))


def spell_words(piece_chars: Tensor, src: Tensor, word_ids: Tensor, max_word_chars: int) -> Tensor:
    """Each word's spelling, concatenated from its pieces' characters.

    Args:
        piece_chars: ``(V, L_p)`` long, the character ids of every piece, left-aligned, 0-padded
            (special pieces such as PAD or UNK have none).
        src: ``(B, T)`` piece ids; word_ids: ``(B, T)`` word index per piece, -1 = no word.
        max_word_chars: ``L_w``; characters past it are dropped.

    Returns:
        ``(B, W, L_w)`` character ids of each word, left-aligned, 0-padded.
    """
    b, t = src.shape
    n_words = int(word_ids.max().item()) + 1 if word_ids.numel() and bool(word_ids.ge(0).any()) else 0
    chars = piece_chars[src]  # (B, T, L_p)
    in_word = word_ids.ge(0)  # (B, T)
    lens = chars.ne(0).sum(-1) * in_word  # (B, T) characters each piece adds
    ends = lens.cumsum(1)  # (B, T) running character count along the sentence
    starts = ends - lens  # (B, T) count before each piece
    wid = word_ids.clamp(min=0)  # (B, T)
    # Count before each word's first piece: the smallest ``starts`` among its pieces.
    big = torch.full((b, max(n_words, 1)), torch.iinfo(torch.long).max, dtype=torch.long, device=src.device)
    word_start = big.scatter_reduce(1, wid, torch.where(in_word, starts, big[:, :1].expand(b, t)), "amin")  # (B, W)
    offset = starts - word_start.gather(1, wid)  # (B, T) where a piece's characters begin in its word
    pos = offset.unsqueeze(-1) + torch.arange(chars.size(-1), device=src.device)  # (B, T, L_p)
    keep = chars.ne(0) & in_word.unsqueeze(-1) & pos.lt(max_word_chars)  # (B, T, L_p)
    dump = n_words * max_word_chars  # one extra slot takes every dropped character
    flat = torch.where(keep, wid.unsqueeze(-1) * max_word_chars + pos, torch.full_like(pos, dump))  # (B, T, L_p)
    out = torch.zeros(b, dump + 1, dtype=torch.long, device=src.device)  # (B, W * L_w + 1)
    out.scatter_(1, flat.view(b, -1), torch.where(keep, chars, torch.zeros_like(chars)).view(b, -1))
    return out[:, :dump].view(b, n_words, max_word_chars)


class CharWordEncoder(nn.Module):
    """A character CNN over each word's spelling (Santos & Zadrozny 2014; Ma & Hovy 2016).

    Characters are embedded, convolved (width ``kernel``), max-pooled over the word and
    projected to ``d_model``: a word never seen in training still has its capitalisation,
    digits, hyphens and suffix (-ly, -ing, -ed) to go by. The spelling is read from the piece
    ids through a ``(V, L_p)`` table of each piece's characters (``set_pieces``, filled from
    the tokenizer and saved with the weights), so the data pipeline is unchanged.

    ``boundaries=True`` frames each spelling with begin/end-of-word markers, so a filter can
    tell a suffix (``ed`` + end) or a prefix from the same letters inside a word (max-pooling
    otherwise discards where in the word a pattern was found).

    ``kernel`` is one width or a list of widths (one convolution each, pooled outputs
    concatenated).

    ``forward(src (B, T), word_ids (B, T)) -> (B, W, D)``; a word without characters gets 0.
    """

    def __init__(self, vocab_size: int, d_model: int, char_dim: int = 32, channels: int = 128,
                 kernel: int | Sequence[int] = 3, max_piece_chars: int = 16, max_word_chars: int = 24,
                 boundaries: bool = False):
        super().__init__()
        kernels = [kernel] if isinstance(kernel, int) else [int(k) for k in kernel]
        if not kernels or min(kernels) < 1:
            raise ValueError(f"char kernel widths must be positive integers, got {kernel!r}")
        self.max_word_chars = max_word_chars
        self.boundaries = boundaries
        self.register_buffer("piece_chars", torch.zeros(vocab_size, max_piece_chars, dtype=torch.long))
        self.embed = nn.Embedding(N_CHAR_IDS, char_dim, padding_idx=0)
        # One convolution per width, ``channels`` filters each (Kim 2016's character CNN has
        # widths 1..7): a width-2 filter sees "ly", a width-5 one "ation". Padded in forward:
        # (k - 1) // 2 left, the rest right, so every width keeps L_w outputs.
        self.pads = [((k - 1) // 2, k - 1 - (k - 1) // 2) for k in kernels]
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, channels, k) for k in kernels)
        self.proj = nn.Linear(channels * len(kernels), d_model)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checkpoints from before several widths were possible name the one convolution "conv".
        for name in ("weight", "bias"):
            old = f"{prefix}conv.{name}"
            if old in state_dict:
                state_dict[f"{prefix}convs.0.{name}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_pieces(self, pieces: list[str | None], special_ids: set[int] = frozenset()) -> None:
        """Fill the piece -> characters table; ``pieces[i]`` is piece ``i``'s string.

        Special pieces (``special_ids``) and missing ones spell nothing; a piece longer than
        ``L_p`` keeps its first ``L_p`` characters.
        """
        table = torch.zeros_like(self.piece_chars)  # (V, L_p)
        if len(pieces) > table.size(0):
            raise ValueError(f"{len(pieces)} pieces for a table of {table.size(0)} rows")
        for i, piece in enumerate(pieces):
            if piece is None or i in special_ids:
                continue
            ids = [char_id(c) for c in piece[: table.size(1)]]
            table[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        self.piece_chars.copy_(table)

    def forward(self, src: Tensor, word_ids: Tensor) -> Tensor:
        chars = spell_words(self.piece_chars, src, word_ids, self.max_word_chars)  # (B, W, L_w)
        if self.boundaries:
            chars = add_boundaries(chars)  # (B, W, L_w + 2)
        b, w, l = chars.shape
        # Each distinct spelling is encoded once: a batch repeats "the", "," and "." many times
        # and pads every sentence to the longest one with empty spellings, so a GUM batch has
        # about half as many distinct spellings as word slots. The vectors (and, through the
        # indexing below, the summed gradients) are the same as encoding every slot.
        spellings, slot = torch.unique(chars.reshape(b * w, l), dim=0, return_inverse=True)  # (U, L), (B*W,)
        # Spellings are left-aligned, so columns past the longest one hold only padding, which
        # embeds to zeros (padding_idx) exactly as the convolutions' own zero padding does.
        longest = int(spellings.ne(0).sum(-1).max()) if spellings.numel() else 0
        spellings = spellings[:, : max(longest, 1)]  # (U, L')
        x = self.embed(spellings).transpose(1, 2)  # (U, L', C) -> (U, C, L')
        real = spellings.unsqueeze(1).ne(0)  # (U, 1, L')
        pooled = [
            # ReLU >= 0, so 0 is a safe pad for the max over the word
            torch.relu(conv(F.pad(x, pad))).masked_fill(~real, 0.0).amax(dim=-1)  # (U, K)
            for conv, pad in zip(self.convs, self.pads)
        ]
        h = pooled[0] if len(pooled) == 1 else torch.cat(pooled, dim=-1)  # (U, K * widths)
        return self.proj(h)[slot].view(b, w, self.proj.out_features)  # (U, D) -> (B*W, D) -> (B, W, D)


def check_pooling(pooling: str) -> str:
    """``pooling`` if it is one of ``POOLINGS``, else a ``ValueError`` naming them."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    return pooling


def pool_words(h: Tensor, word_ids: Tensor, pooling: str = "first") -> Tensor:
    """Pool piece vectors into word vectors.

    Args:
        h: ``(B, T, D)`` piece vectors.
        word_ids: ``(B, T)`` long, the word index of each piece, ``-1`` for pieces
            that belong to no word (padding, specials).
        pooling: ``"first"`` — a word's first piece (Devlin et al. 2019, sec. 5.3);
            ``"mean"`` — the average of its pieces.

    Returns:
        ``(B, W, D)`` with ``W = max(word_ids) + 1``; words with no piece are zeros.
    """
    check_pooling(pooling)
    b, t, d = h.shape
    valid = word_ids >= 0  # (B, T)
    n_words = int(word_ids.max().item()) + 1 if valid.any() else 0
    idx = word_ids.clamp(min=0)  # (B, T); invalid pieces are neutralised below
    if pooling == "mean":
        hv = h * valid.unsqueeze(-1).to(h.dtype)  # (B, T, D)
        sums = h.new_zeros(b, n_words, d).scatter_add_(1, idx.unsqueeze(-1).expand(-1, -1, d), hv)  # (B, W, D)
        counts = h.new_zeros(b, n_words).scatter_add_(1, idx, valid.to(h.dtype))  # (B, W)
        return sums / counts.clamp(min=1).unsqueeze(-1)
    # pooling == "first", the only other choice check_pooling allows
    pos = torch.arange(t, device=h.device).expand(b, t)  # (B, T)
    pos = torch.where(valid, pos, torch.full_like(pos, t))  # invalid pieces point past the end
    first = torch.full((b, n_words), t, dtype=torch.long, device=h.device)
    first = first.scatter_reduce(1, idx, pos, reduce="amin")  # (B, W): first piece of each word
    h_ext = torch.cat([h, h.new_zeros(b, 1, d)], dim=1)  # (B, T + 1, D); row T = "no piece"
    return h_ext.gather(1, first.unsqueeze(-1).expand(-1, -1, d))  # (B, W) -> (B, W, D)


@dataclass(kw_only=True)
class TaggerConfig(EncoderConfig):
    """``EncoderConfig`` plus the tag sets, the word pooling and the character encoder.

    Fields:
        n_tags: number of tag classes C.
        n_aux_tags: if > 0, a second linear classifier over the same word vectors for an
            auxiliary tag set (e.g. XPOS beside UPOS: multi-task training, see
            ``TaggingTask``'s ``aux_weight``); ``forward`` returns the main tags only,
            ``forward_all`` both.
        pooling: ``"first"`` or ``"mean"`` piece pooling per word.
        char_channels: if > 0, a ``CharWordEncoder`` with this many filters adds each word's
            spelling vector to the input embedding of every piece of the word (so attention
            sees its neighbours' spellings too); fill its table with ``set_pieces``.
        char_dim, char_kernel: its character embedding size and convolution width (or list
            of widths).
        char_boundaries: frame each word's spelling with begin/end markers (see
            ``CharWordEncoder``).
        context: ``"piece"`` — the encoder runs over pieces and its outputs are pooled per
            word; ``"word"`` — each word's piece embeddings are pooled (plus its spelling
            vector) and the encoder runs over words, so a local ``window`` and relative
            positions count words, and sequences are shorter.
    """

    n_tags: int = hp(within=Range(1, 2**20))
    pooling: str = "first"
    char_channels: int = hp(0, within=Range(0, 2**14))
    char_dim: int = hp(32, within=Range(1, 2**14))
    char_kernel: int | Sequence[int] = hp(3, within=Range(1, 64))
    char_boundaries: bool = False
    context: str = "piece"
    n_aux_tags: int = hp(0, within=Range(0, 2**20))


class Tagger(nn.Module):
    """Transformer encoder + per-word linear classifier.

    ``forward(src (B, T), word_ids (B, T), spell=None) -> logits (B, W, C)``; ``spell`` (same
    shape as ``src``) are the piece ids the character encoder spells words from, when they
    differ from the embedded ones (``src`` with some words hidden, see
    ``tasks.tagging.TaggingTask``'s ``piece_dropout``); default ``src``.

    Args:
        cfg: the sizes, tag sets and word encoding (``TaggerConfig``).
    """

    config_class = TaggerConfig

    def __init__(self, cfg: TaggerConfig):
        super().__init__()
        check_pooling(cfg.pooling)
        if cfg.context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {cfg.context!r}")
        self.cfg = cfg
        self.context = cfg.context
        self.pad_id = cfg.pad_id
        self.vocab_size = cfg.vocab_size
        self.n_tags = cfg.n_tags
        self.pooling = cfg.pooling
        self.encoder = TransformerEncoder(cfg, cfg.n_layers)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_tags)
        self.n_aux_tags = cfg.n_aux_tags
        self.aux_classifier = nn.Linear(cfg.d_model, cfg.n_aux_tags) if cfg.n_aux_tags > 0 else None
        init_weights(self, cfg.d_model)
        # Built after init_weights: the convolution keeps PyTorch's default initialisation.
        self.chars = (
            CharWordEncoder(cfg.vocab_size, cfg.d_model, cfg.char_dim, cfg.char_channels, cfg.char_kernel,
                            boundaries=cfg.char_boundaries)
            if cfg.char_channels > 0
            else None
        )

    def set_pieces(self, pieces: list[str | None], special_ids: set[int] = frozenset()) -> None:
        """Give the character encoder each piece's string (no-op without one)."""
        if self.chars is not None:
            self.chars.set_pieces(pieces, special_ids)

    def forward(self, src: Tensor, word_ids: Tensor, spell: Tensor | None = None) -> Tensor:
        return self.classifier(self.dropout(self.word_vectors(src, word_ids, spell)))  # (B, W, C)

    def forward_all(self, src: Tensor, word_ids: Tensor, spell: Tensor | None = None,
                    input_hook: InputHook | None = None) -> tuple[Tensor, Tensor | None]:
        """``(logits (B, W, C), aux_logits (B, W, C_aux) or None)`` from one encoder pass;
        ``input_hook`` as in ``word_vectors``."""
        h = self.dropout(self.word_vectors(src, word_ids, spell, input_hook))  # (B, W, D)
        aux = self.aux_classifier(h) if self.aux_classifier is not None else None
        return self.classifier(h), aux

    def word_vectors(self, src: Tensor, word_ids: Tensor, spell: Tensor | None = None,
                     input_hook: InputHook | None = None) -> Tensor:
        """The encoder's vector for each word, ``(B, W, D)``: what the classifiers read.

        ``input_hook`` (optional) receives the encoder's input vectors (``(B, W, D)`` word
        vectors with ``context="word"``, ``(B, T, D)`` piece vectors otherwise; positions not
        yet added) and returns the vectors to encode instead: adversarial training perturbs
        them there (``tasks.tagging.TaggingTask``'s ``adversarial_eps``).
        """
        spell = src if spell is None else spell  # (B, T)
        if self.context == "word":
            return self._encode_words(src, word_ids, spell, input_hook)
        mask = pad_mask(src, self.pad_id)  # (B, T)
        x = self.encoder.embed_tokens(src)  # (B, T, D)
        if self.chars is not None:
            spelled = self.chars(spell, word_ids)  # (B, W, D)
            d = spelled.size(-1)
            per_piece = spelled.gather(1, word_ids.clamp(min=0).unsqueeze(-1).expand(-1, -1, d))  # (B, T, D)
            x = x + per_piece * word_ids.ge(0).unsqueeze(-1).to(per_piece.dtype)
        if input_hook is not None:
            x = input_hook(x)
        h = self.encoder.forward_embeddings(x, mask)  # (B, T, D)
        return pool_words(h, word_ids, self.pooling)  # (B, W, D)

    def _encode_words(self, src: Tensor, word_ids: Tensor, spell: Tensor,
                      input_hook: InputHook | None = None) -> Tensor:
        words = pool_words(self.encoder.embed_tokens(src), word_ids, self.pooling)  # (B, W, D)
        if self.chars is not None:
            words = words + self.chars(spell, word_ids)  # (B, W, D)
        if input_hook is not None:
            words = input_hook(words)
        b, w = words.shape[:2]
        valid = word_ids.ge(0)  # (B, T)
        pieces = torch.zeros(b, w, dtype=torch.long, device=src.device)  # (B, W) pieces per word
        pieces.scatter_add_(1, word_ids.clamp(min=0), valid.long())
        real = pieces.gt(0)  # (B, W): words padding the batch have no piece
        return self.encoder.forward_embeddings(words, real)  # (B, W, D)
