"""An autoregressive translation checkpoint as a CTranslate2 model directory.

CTranslate2 (https://opennmt.net/CTranslate2) serves Transformer translation models on CPUs and
GPUs with int8/float16 weights and batched search. Its ``TransformerSpec`` describes the same
network as ``models.EncoderDecoder``; this module fills one from our weights, tensor by tensor:

* token embeddings, multiplied by √d_model in both (``scale_embeddings``) or in neither;
* positions: our own table (sinusoidal or learned) is written as ``position_encodings``, so the
  export computes whichever sinusoid layout the model uses (``modules.positional.sinusoid_table``:
  the paper's interleaved sin/cos or Marian's halves); T5 relative buckets map to its
  ``relative_attention_bias`` (one table per stack, shared by its layers as in T5);
* pre-norm (with each stack's final LayerNorm) or post-norm layers, LayerNorm epsilon copied;
* self-attention Q, K, V fused into one projection, cross-attention K and V into one;
* ReLU, exact (erf) GELU or SiLU (CTranslate2's SWISH); shared source/target embeddings, the tied
  output projection and its bias (``output_bias``, Marian's ``final_logits_bias``);
* the vocabularies are the tokenizers' pieces, so our BOS (Marian's: the padding piece, which
  starts its decoder), EOS and unknown pieces are the model's start, end and unknown tokens, and
  the source gets EOS appended as our collator does.
* a multilingual model's directions go to ``languages.json`` and its ``<2xx>`` target tags stay
  special tokens of the source tokenizer, so the folder tags a source as the checkpoint does
  (:func:`write_languages`, ``CTranslate2Translator``'s ``tgt_lang``);
* a pretrained family's language codes (M2M100, NLLB, mBART-50: ``data.tag_side=codes``) go to
  ``languages.json`` too: the source starts with its language's code, the decoder from EOS with
  the target's code as a one-token prefix; their offset position tables (the first piece at
  row 2) are written from their first piece's row, and mBART's embedding LayerNorm is
  CTranslate2's ``layernorm_embedding``.

``mask_target_padding`` changes only teacher forcing, never a search, so it needs nothing here.
What CTranslate2 cannot compute the same way is refused with an ``ExportError`` that names it
(a local attention window, models other than the autoregressive encoder-decoder), rather than
exported as a different network.
"""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from transformer.data.parallel import languages
from transformer.export.folder import ExportError, write_export_dir
from transformer.files import disk_full, write_text
from transformer.models.transformer import EncoderDecoder
from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
    sinusoid_table,
)

INSTALL_HINT = 'CTranslate2 is not installed: pip install "transformer[export]" (or pip install ctranslate2)'
# ``quantization=`` values CTranslate2's converter takes (weights stored in that type).
SOURCE_TOKENIZER, TARGET_TOKENIZER = "source_tokenizer.json", "target_tokenizer.json"
LANGUAGES = "languages.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")


def _ct2():
    try:
        import ctranslate2
    except ImportError:
        raise ExportError(INSTALL_HINT) from None
    return ctranslate2


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy().copy()


def check_exportable(model: nn.Module) -> None:
    """Raise ``ExportError`` naming the first construct CTranslate2 would compute differently."""
    if not isinstance(model, EncoderDecoder):
        raise ExportError(
            f"CTranslate2 export takes an autoregressive translation checkpoint (EncoderDecoder); "
            f"this one holds a {type(model).__name__}"
        )
    if model.encoder.window is not None:
        raise ExportError(
            f"the encoder attends within a local window (window={model.encoder.window}); "
            "CTranslate2's Transformer has no local attention mask, so it would attend to the whole source"
        )
    for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        pos = stack.positional
        known = (SinusoidalPositionalEncoding, LearnedPositionalEncoding, NoPositionalEncoding, RelativePositionBias)
        if type(pos) not in known:
            raise ExportError(f"the {name}'s positional encoding {type(pos).__name__} has no CTranslate2 equivalent")
    if model.cfg.memory_positions:
        raise ExportError("the decoder adds positions to the encoder output it attends to (memory_positions=true); "
                          "CTranslate2's cross-attention reads the encoder output as it is")
    if model.cfg.type_vocab_size:
        raise ExportError(f"the encoder adds a token-type embedding (type_vocab_size={model.cfg.type_vocab_size}); "
                          "CTranslate2's Transformer has none")
    eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    if len(eps) > 1:
        raise ExportError(f"LayerNorms use different epsilons {sorted(eps)}; CTranslate2 takes one for the model")
    act = model.decoder.layers[0].ffn.activation
    if act not in _ACTIVATIONS:
        raise ExportError(f"feed-forward activation {act} has no CTranslate2 equivalent")


# Our FFN activations -> CTranslate2's ``common_spec.Activation`` names: exact GELU (erf) is its
# GELU (GELUTanh would be the approximation), x·sigmoid(x) its SWISH (Marian's).
_ACTIVATIONS = {F.relu: "RELU", F.gelu: "GELU", F.silu: "SWISH"}


def _activation(model: EncoderDecoder):
    from ctranslate2.specs import common_spec

    return common_spec.Activation[_ACTIVATIONS[model.decoder.layers[0].ffn.activation]]


def _set_linear(spec, *linears: nn.Linear) -> None:
    """One CTranslate2 linear from one or several of ours stacked on the output axis (fused QKV)."""
    spec.weight = np.concatenate([_np(lin.weight) for lin in linears], axis=0)  # (sum out, in)
    if all(lin.bias is not None for lin in linears):
        spec.bias = np.concatenate([_np(lin.bias) for lin in linears], axis=0)


def _set_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def _set_self_attention(spec, attn, norm: nn.LayerNorm) -> None:
    _set_linear(spec.linear[0], attn.w_q, attn.w_k, attn.w_v)
    _set_linear(spec.linear[1], attn.w_o)
    _set_norm(spec.layer_norm, norm)


def _set_cross_attention(spec, attn, norm: nn.LayerNorm) -> None:
    _set_linear(spec.linear[0], attn.w_q)
    _set_linear(spec.linear[1], attn.w_k, attn.w_v)
    _set_linear(spec.linear[2], attn.w_o)
    _set_norm(spec.layer_norm, norm)


def _set_ffn(spec, ffn, norm: nn.LayerNorm) -> None:
    _set_linear(spec.linear_0, ffn.w_1)
    _set_linear(spec.linear_1, ffn.w_2)
    _set_norm(spec.layer_norm, norm)


def _set_positions(spec, stack, max_len: int) -> None:
    """Absolute positions as a table; relative buckets as the first layer's bias, shared."""
    pos = stack.positional
    if isinstance(pos, RelativePositionBias):
        first = spec.layer[0].self_attention
        first.relative_attention_bias = _np(pos.embedding.weight)  # (num_buckets, H)
        first.relative_attention_max_distance = np.dtype("int32").type(pos.max_distance)
        for layer in spec.layer[1:]:
            layer.self_attention.relative_attention_bias = first.relative_attention_bias
            layer.self_attention.relative_attention_max_distance = first.relative_attention_max_distance
        return
    if isinstance(pos, LearnedPositionalEncoding):
        table = _np(pos.embedding.weight[pos.first_position:])  # (max_len, D) from the first piece's row
    elif isinstance(pos, SinusoidalPositionalEncoding):
        first = pos.first_position  # the rows from the first piece's: (max_len, D), any layout
        table = _np(sinusoid_table(max_len + first, stack.d_model, pos.layout)[first:])
    else:  # NoPositionalEncoding: nothing is added
        table = np.zeros((max_len, stack.d_model), dtype=np.float32)
    spec.position_encodings.encodings = table


def _set_stack(spec, stack, max_len: int, decoder: bool) -> None:
    emb = spec.embeddings if decoder else spec.embeddings[0]
    emb.weight = _np(stack.embedding.weight)  # (V, D)
    spec.scale_embeddings = stack.embed_scale != 1.0  # True: both multiply it by √d_model
    _set_positions(spec, stack, max_len)
    if isinstance(stack.embedding_norm, nn.LayerNorm):  # after positions, before the layers (mBART's)
        _set_norm(spec.layernorm_embedding, stack.embedding_norm)
    for layer_spec, layer in zip(spec.layer, stack.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.norm_1)
        if decoder:
            _set_cross_attention(layer_spec.attention, layer.cross_attn, layer.norm_2)
            _set_ffn(layer_spec.ffn, layer.ffn, layer.norm_3)
        else:
            _set_ffn(layer_spec.ffn, layer.ffn, layer.norm_2)
    if isinstance(stack.final_norm, nn.LayerNorm):
        _set_norm(spec.layer_norm, stack.final_norm)


def _vocabulary(tokenizer, size: int) -> list[str]:
    """One token per embedding row. Rows the tokenizer never produces (a Marian ``vocab.json``
    smaller than the model's table, or with gaps) get placeholder names, so that ids stay rows."""
    tokens = [tokenizer.id_to_token(i) for i in range(size)]
    taken = set(tokens)
    for i, token in enumerate(tokens):
        if token is None:
            token = f"<unused{i}>"
            while token in taken:
                token = f"<{token}>"
            tokens[i] = token
    return tokens


def build_ctranslate2_spec(task):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding ``task``'s model and vocabularies.

    ``task``: a ``TranslationTask`` (as ``tasks.checkpoint.load_task`` returns it).
    """
    _ct2()  # ExportError with the install command when missing
    from ctranslate2.specs import transformer_spec

    model = task.model  # a JointCTCEncoderDecoder's CTC head is not read: it only trains the encoder
    check_exportable(model)
    enc, dec = model.encoder, model.decoder
    relative = isinstance(enc.positional, RelativePositionBias)
    if relative != isinstance(dec.positional, RelativePositionBias):
        raise ExportError("CTranslate2 needs relative positions in both stacks or in neither")
    pre_norm = dec.layers[0].norm_first
    spec = transformer_spec.TransformerSpec.from_config(
        (len(enc.layers), len(dec.layers)), dec.layers[0].self_attn.n_heads,
        pre_norm=pre_norm, activation=_activation(model), relative_attention_bias=relative,
        layernorm_embedding=bool(model.cfg.embedding_norm),
    )
    max_len = int(task.max_len or 1024)
    _set_stack(spec.encoder, enc, max_len, decoder=False)
    _set_stack(spec.decoder, dec, max_len, decoder=True)
    spec.decoder.projection.weight = _np(dec.output_proj.weight)  # (V, D), tied or not
    if dec.output_bias is not None:  # Marian's final_logits_bias
        spec.decoder.projection.bias = _np(dec.output_bias)  # (V,)

    hp = task.hparams
    src_tok, tgt_tok = task.src_tokenizer, task.tgt_tokenizer
    if src_tok is None or tgt_tok is None:
        raise ExportError("the checkpoint carries no tokenizer, so it has no vocabulary to export")
    spec.register_source_vocabulary(_vocabulary(src_tok, model.src_vocab_size))
    spec.register_target_vocabulary(_vocabulary(tgt_tok, model.vocab_size))
    cfg = spec.config
    cfg.bos_token = tgt_tok.id_to_token(hp.bos_id)
    cfg.eos_token = tgt_tok.id_to_token(hp.eos_id)
    cfg.unk_token = tgt_tok.id_to_token(tgt_tok.unk_id)
    # decoding starts from our BOS, as in greedy_search (Marian's: the padding id, whose
    # embedding row is the model's own, so no start_from_zero_embedding)
    cfg.decoder_start_token = cfg.bos_token
    if task.languages.tag_to_decoder:  # each target starts with its language tag: a one-token prefix
        cfg.decoder_start_token = None
    # codes (a pretrained family's): the decoder starts from BOS (its EOS) and the target's code, a
    # one-token prefix after it
    cfg.add_source_eos = True  # TranslationCollator appends EOS to every source
    cfg.layer_norm_epsilon = float(next(m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)))
    spec.validate()
    return spec


def export_ctranslate2(task, output_dir: str | Path, quantization: str | None = None,
                       force: bool = False) -> Path:
    """Write ``task``'s model as a CTranslate2 directory: ``model.bin``, ``config.json``, the
    vocabularies, and our tokenizers as ``source_tokenizer.json`` / ``target_tokenizer.json``
    (so the directory alone translates raw text, see ``CTranslate2Translator``).
    ``quantization`` is CTranslate2's weight type (``int8``, ``float16``, ...; None = float32)."""
    ct2 = _ct2()

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization={quantization!r} unknown; choose from {', '.join(QUANTIZATIONS)}")

    class _TaskConverter(ct2.converters.Converter):
        def _load(self):
            return build_ctranslate2_spec(task)

    def fill(tmp: Path) -> None:
        try:
            _TaskConverter().convert(str(tmp), quantization=quantization, force=True)
        except OSError as exc:
            raise disk_full(exc, Path(output_dir) / "model.bin") if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc
        # to_str: a tokenizer.json, or a SentencePiece tokenizer's JSON (Marian's); read back by
        # data.core.tokenizer.tokenizer_from_str
        write_text(tmp / SOURCE_TOKENIZER, task.src_tokenizer.to_str())
        write_text(tmp / TARGET_TOKENIZER, task.tgt_tokenizer.to_str())
        write_languages(task, tmp)

    return write_export_dir(output_dir, fill, force)


def write_languages(task, folder: Path) -> None:
    """The checkpoint's languages as ``languages.json`` (``src_lang``, ``tgt_lang``, ``data``:
    ``directions`` and ``tag_side``, as ``data.parallel.languages`` reads them from a checkpoint). A multilingual
    model's source tokenizer must hold each target's ``<2xx>`` tag, as a special token (one
    id, never split): an ``ExportError`` otherwise."""
    import json

    model_languages = task.languages
    if model_languages.multilingual and not model_languages.coded:
        for lang in model_languages.targets:
            i = task.src_tokenizer.token_to_id(languages.tag(lang))
            if i is None or i not in task.src_tokenizer.special_ids:
                raise ExportError(f"the model translates into {lang} but its source tokenizer has no special token "
                                  f"{languages.tag(lang)}")
    record = model_languages.record()
    if model_languages.coded:  # a pretrained family's: its languages, their codes and its decoder start
        record["bos_id"] = int(task.hparams["bos_id"])
    (Path(folder) / LANGUAGES).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def read_languages(folder: Path) -> languages.Languages:
    """The languages ``languages.json`` of an export folder records; a folder written before it
    (a bilingual model whose languages were not recorded) reads as ``src``/``tgt``."""
    import json

    path = Path(folder) / LANGUAGES
    if not path.is_file():
        return languages.Languages("src", "tgt")
    return languages.Languages.of_checkpoint(json.loads(path.read_text(encoding="utf-8")))


class CTranslate2Translator:
    """Raw sentences in, detokenized translations out, through an exported directory.

    Tokenizes with the exported tokenizer, searches with CTranslate2 under our length rule
    (at most ``floor(max_len_a * (source pieces + EOS) + max_len_b)`` tokens, EOS included,
    as ``decoding.greedy_search`` / ``beam_search``) and decodes the pieces back to text.
    CTranslate2 takes one cap per call: beam search groups the sentences by their cap, greedy
    search decodes them all to the longest and again only those its own cap cuts; within a call
    CTranslate2 batches ``max_batch_size`` examples or tokens (``batch_type``).
    """

    def __init__(self, model_dir: str | Path, device: str = "cpu", compute_type: str = "default",
                 threads: int = 1, max_len_a: float = 1.2, max_len_b: int = 10, max_batch_size: int = 64,
                 batch_type: str = "examples"):
        from transformer.data.core.tokenizer import tokenizer_from_str

        ct2 = _ct2()
        model_dir = Path(model_dir)
        self.src_tok = tokenizer_from_str((model_dir / SOURCE_TOKENIZER).read_text(encoding="utf-8"))
        self.tgt_tok = tokenizer_from_str((model_dir / TARGET_TOKENIZER).read_text(encoding="utf-8"))
        self.translator = ct2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                         inter_threads=1, intra_threads=threads)
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
        self.max_batch_size, self.batch_type = max_batch_size, batch_type
        self.languages = read_languages(model_dir)  # the checkpoint's
        # data.tag_side=codes: a pretrained family's; its decoder starts from EOS, which stays a choice
        self.coded = self.languages.coded
        self.banned = [[self.tgt_tok.id_to_token(self.tgt_tok.pad_id)]] + \
            ([] if self.coded else [[self.tgt_tok.id_to_token(self.tgt_tok.bos_id)]])
        # data.tag_side=decoder: a source's tag goes to CTranslate2 as the target prefix it starts
        # from; codes: the target's code, after the start token
        self.tag_to_decoder = self.languages.tag_to_decoder or self.coded

    def translate_ids(self, sources: list[list[int]], beam_size: int = 1, length_penalty: float = 1.0) -> list[list[int]]:
        """Source piece ids (without EOS) -> output ids (without BOS/EOS), in input order."""
        return [ids for ids, _ in self.translate_scored_ids(sources, beam_size, length_penalty)]

    def translate_scored_ids(self, sources: list[list[int]], beam_size: int = 1,
                             length_penalty: float = 1.0) -> list[tuple[list[int], float]]:
        """``translate_ids`` with each output's score (``translate_nbest_ids``' best)."""
        return [nbest[0] for nbest in self.translate_nbest_ids(sources, beam_size, length_penalty)]

    def translate_nbest_ids(self, sources: list[list[int]], beam_size: int = 1, length_penalty: float = 1.0,
                            n_best: int = 1) -> list[list[tuple[list[int], float]]]:
        """Per source, the ``n_best`` (at most ``beam_size``) outputs, best first, each with its
        score as our search gives it: beam search's log-probability divided by length **
        ``length_penalty`` (CTranslate2's own score), greedy's summed log-probability (asked of
        CTranslate2 with no length penalty, which does not change a greedy choice). CTranslate2
        normalises each step over the tokens search may choose (PAD and BOS suppressed before
        its softmax), our search over all, so the scores agree where a model gives those two no
        probability (a trained one: to 1e-4). An empty source gets ``[([], 0.0)]``."""
        out: list[list[tuple[list[int], float]]] = [[([], 0.0)] for _ in sources]
        starts: list[int | None] = [None] * len(sources)
        if self.tag_to_decoder:  # each tag starts its target (Translator does the same for our search)
            starts = [ids[0] if ids else None for ids in sources]
            sources = [ids[1:] if ids else ids for ids in sources]
        self._starts = starts
        caps = {i: int(self.max_len_a * (len(ids) + 1) + self.max_len_b) for i, ids in enumerate(sources) if ids}
        todo = list(caps)
        if beam_size == 1 and len(set(caps.values())) > 1:
            # A greedy choice does not depend on the cap: every sentence is decoded at once to the
            # longest cap, and those that ended (EOS included) within their own keep that output;
            # the rest are decoded again at theirs. Small calls (a server's) then make one
            # CTranslate2 call, not one per distinct cap.
            first = self._search(todo, sources, max(caps.values()), 1, 0.0)
            todo = []
            for i, nbest in zip(list(caps), first):
                if len(nbest[0][0]) < caps[i]:
                    out[i] = nbest
                else:
                    todo.append(i)
        by_cap: dict[int, list[int]] = {}
        for i in todo:
            by_cap.setdefault(caps[i], []).append(i)
        for cap, rows in by_cap.items():
            for i, nbest in zip(rows, self._search(rows, sources, cap, beam_size, length_penalty, n_best)):
                out[i] = nbest
        return out

    def _search(self, rows: list[int], sources: list[list[int]], cap: int, beam_size: int,
                length_penalty: float, n_best: int = 1) -> list[list[tuple[list[int], float]]]:
        """One CTranslate2 call over ``sources[rows]`` at the output cap ``cap``: per row, its
        ``n_best`` outputs with their scores."""
        pieces = [[self.src_tok.id_to_token(t) for t in sources[i]] for i in rows]
        prefix = {}
        if self.tag_to_decoder:
            prefix = {"target_prefix": [[self.tgt_tok.id_to_token(self._starts[i])] for i in rows]}
        results = self.translator.translate_batch(
            pieces, beam_size=beam_size, length_penalty=length_penalty if beam_size > 1 else 0.0,
            # a pretrained family's target code is a returned prefix token: one more in the cap
            max_decoding_length=cap + int(self.coded), max_batch_size=self.max_batch_size, batch_type=self.batch_type,
            # as our search: an empty output (EOS first) is allowed, PAD and BOS never chosen
            min_decoding_length=0, suppress_sequences=self.banned, return_scores=True,
            num_hypotheses=min(n_best, beam_size), **prefix,
        )
        # (with no decoder_start_token the prefix's first token is the start token, not returned;
        # with one, a pretrained family's, the prefix is the target's code, returned first)
        skip = 1 if self.coded else 0
        return [[([self.tgt_tok.token_to_id(t) for t in hyp[skip:]], float(score))
                 for hyp, score in zip(res.hypotheses, res.scores)] for res in results]

    def source_ids(self, sentences: list[str], tgt_lang=None, src_lang=None) -> list[list[int]]:
        """Each sentence's source ids, with the ``<2xx>`` tag of its target language in front
        (``tgt_lang``: one language for all, or one per sentence; None for a bilingual model),
        as ``data.parallel.languages.tagged_source_ids`` frames them for our own search, or a
        pretrained family's codes of ``tgt_lang`` and ``src_lang`` (one or one per sentence;
        ``Languages.coded_framing``); a blank line gets no ids."""
        from transformer.data.parallel.languages import tagged_source_ids

        def each(value):
            return value if isinstance(value, (list, tuple)) else [value] * len(sentences)

        rows = []
        for s, t, src in zip(sentences, each(tgt_lang), each(src_lang)):
            if not s.strip():
                rows.append([])
            elif self.coded:
                langs = self.languages
                codes = langs.codes or {}
                # a model fine-tuned in one direction is framed for its own pair by default
                t = t or (langs.tgt_lang if langs.tgt_lang in codes else None)
                src = src or (langs.src_lang if langs.src_lang in codes else None)
                rows.append(langs.coded_framing(self.src_tok, src, t) + self.src_tok.encode(s))
            else:
                rows.append(tagged_source_ids(self.src_tok, s, t))
        return rows

    def translate_nbest(self, sentences: list[str], beam_size: int = 1, length_penalty: float = 1.0,
                        n_best: int = 1, tgt_lang=None, src_lang=None) -> list[list[tuple[str, float]]]:
        """Detokenized n-best lists with their scores (``translate_nbest_ids``) of sentences
        tagged for ``tgt_lang`` (``source_ids``; ``src_lang``: a pretrained family's); an empty
        (or blank) line translates to ``[("", 0.0)]``."""
        sources = self.source_ids(sentences, tgt_lang, src_lang)
        return [[(self.tgt_tok.decode(ids), score) for ids, score in nbest]
                for nbest in self.translate_nbest_ids(sources, beam_size, length_penalty, n_best)]

    def translate(self, sentences: list[str], beam_size: int = 1, length_penalty: float = 1.0,
                  tgt_lang=None, src_lang=None) -> list[str]:
        """Detokenized translations into ``tgt_lang``; an empty (or blank) line translates to ""."""
        return [nbest[0][0] for nbest in self.translate_nbest(sentences, beam_size, length_penalty, 1, tgt_lang,
                                                              src_lang)]


def is_export_dir(path) -> bool:
    """Whether ``path`` is a folder written by ``export_ctranslate2`` (its model and tokenizers)."""
    folder = Path(path)
    return all((folder / name).is_file() for name in ("model.bin", SOURCE_TOKENIZER, TARGET_TOKENIZER))
