"""Write a checkpoint's attention and position pictures, raw weights and an HTML index.

Each ``inspect_*`` function writes into ``out_dir``: PNGs, one ``.npz`` of the raw arrays
beside them (keys listed in its docstring), and ``index.html``; it returns the written paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from transformer.inspect import plots
from transformer.inspect.attention import capture_encoder_attention, refuse_two_id_start, translation_attention
from transformer.inspect.positions import position_arrays


def piece_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Readable axis labels: each piece's own text (byte-level markers decoded, edges stripped),
    special tokens by name (a multilingual source's ``<2fr>`` too), ``·`` for a piece that is
    only whitespace."""
    specials = {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id,
                *tokenizer.special_ids}
    labels = []
    for i in ids:
        if i in specials:
            labels.append(tokenizer.id_to_token(i))
        else:
            labels.append(tokenizer.decode([i]).strip() or "·")
    return labels


def inspect_translation(task, sentences: Sequence[str], decode, out_dir: str | Path,
                        max_tokens: int = 80, tgt_lang: str | None = None) -> list[Path]:
    """Attention of a translation checkpoint on its own translation of each sentence, searched
    for with the settings ``decode`` (a ``DecodeSettings``, as ``task.translator`` takes).

    Per sentence ``k`` a folder ``sentence_{k}/`` with ``encoder_layer{i}.png`` (source ×
    source), ``decoder_layer{i}.png`` (masked self-attention, decoder input × itself),
    ``cross_layer{i}.png`` (predicted token × source), one panel per head, and
    ``alignment.png`` (cross-attention of the last layer averaged over heads). ``attention.npz``
    holds ``encoder.layer{i} (H, S, S)``, ``decoder.layer{i} (H, T, T)``, ``cross.layer{i}
    (H, T, S)`` and the token lists ``source``, ``target_in`` (BOS, or a decoder-side target
    tag, + hypothesis) and ``target_out`` (hypothesis + EOS, what each row predicts).
    ``tgt_lang``: a multilingual model's target language, whose tag frames each sentence.
    """
    hp = task.hparams
    refuse_two_id_start(hp, "transformer-inspect")
    translator = task.translator(decode).set_target_language(tgt_lang)  # None: a bilingual model, untagged
    search = task.search_fn(decode)
    report = plots.Report(out_dir)
    for k, sentence in enumerate(sentences):
        ids, start = task.languages.split_tag(translator.encode(sentence))  # a decoder-side tag starts the target
        src = torch.tensor([ids + [hp.eos_id]], dtype=torch.long)  # (1, S), as the collator builds it
        first = hp.bos_id if start is None else start
        hyp = (search(src) if start is None else search(src, start=torch.tensor([start])))[0][0][0]
        att = translation_attention(task.model, src, [hyp], first, hp.pad_id)
        src_labels = piece_labels(task.src_tokenizer, src[0].tolist())
        tgt_in = piece_labels(task.tgt_tokenizer, [first, *hyp])
        tgt_out = piece_labels(task.tgt_tokenizer, [*hyp, hp.eos_id])
        folder = report.folder(f"sentence_{k}")
        arrays: dict[str, np.ndarray] = {"source": np.array(src_labels), "target_in": np.array(tgt_in),
                                         "target_out": np.array(tgt_out),
                                         "text": np.array([sentence, task.tgt_tokenizer.decode(hyp)])}
        pictures = []
        for i, w in enumerate(att.encoder):
            arrays[f"encoder.layer{i}"] = w[0].numpy()
            plots.plot_heads(w[0].numpy(), src_labels, src_labels, f"encoder self-attention, layer {i}",
                             folder / f"encoder_layer{i}.png", max_tokens)
            pictures.append(f"encoder_layer{i}.png")
        for i, (sw, cw) in enumerate(zip(att.decoder, att.cross)):
            arrays[f"decoder.layer{i}"] = sw[0].numpy()
            arrays[f"cross.layer{i}"] = cw[0].numpy()
            plots.plot_heads(sw[0].numpy(), tgt_in, tgt_in, f"decoder masked self-attention, layer {i}",
                             folder / f"decoder_layer{i}.png", max_tokens)
            plots.plot_heads(cw[0].numpy(), tgt_out, src_labels, f"cross-attention, layer {i}",
                             folder / f"cross_layer{i}.png", max_tokens)
            pictures += [f"decoder_layer{i}.png", f"cross_layer{i}.png"]
        last = len(att.cross) - 1
        plots.plot_matrix(att.cross[last][0].mean(0).numpy(), tgt_out, src_labels,
                          f"alignment: cross-attention of layer {last}, mean over heads", folder / "alignment.png",
                          xlabel="source", ylabel="predicted target", max_tokens=max_tokens)
        pictures.append("alignment.png")
        report.add(f"sentence_{k}", f"{k}: {sentence} → {task.tgt_tokenizer.decode(hyp)}", arrays, pictures)
    return report.close()


def inspect_tagging(task, sentences: Sequence[Sequence[str]], out_dir: str | Path, max_tokens: int = 80) -> list[Path]:
    """Encoder self-attention of a tagger on each pre-tokenized sentence, axes labelled
    ``piece/TAG`` (the predicted tag on each word's first piece; ``word/TAG`` for models that
    attend over words). A local window shows as a band, relative-position heads as diagonals.

    Per sentence ``sentence_{k}/encoder_layer{i}.png`` and ``attention.npz`` with
    ``encoder.layer{i} (H, T, T)``, ``tokens`` and ``tags``.
    """
    report = plots.Report(out_dir)
    encoder = task.model.encoder
    for k, words in enumerate(sentences):
        with capture_encoder_attention(encoder) as calls:
            tags = task.tagger().tag([list(words)])[0]
        if len(calls) != 1:
            raise ValueError(f"sentence {k} is longer than the model's positional range; "
                             f"inspect a shorter one")
        ids, word_ids = task.tokenizer.encode_words(list(words))
        if task.model.context == "word":
            labels = [f"{w}/{t}" for w, t in zip(words, tags)]
        else:
            pieces = piece_labels(task.tokenizer, ids)
            labels = [f"{p}/{tags[w]}" if j == 0 or word_ids[j - 1] != w else p
                      for j, (p, w) in enumerate(zip(pieces, word_ids))]
        arrays = {"tokens": np.array(labels), "tags": np.array(tags)}
        for i, w in enumerate(calls[0]):
            arrays[f"encoder.layer{i}"] = w[0].float().cpu().numpy()  # (H, T, T)
        pictures = plots.plot_encoder_layers(arrays, labels, report.folder(f"sentence_{k}"), max_tokens,
                                             "tagger encoder self-attention")
        report.add(f"sentence_{k}", f"{k}: {' '.join(f'{w}/{t}' for w, t in zip(words, tags))}", arrays, pictures)
    return report.close()


def inspect_positions(model: torch.nn.Module, out_dir: str | Path, n_positions: int = 64) -> list[Path]:
    """The positional encoding of each stack (``encoder``, ``decoder`` where present).

    Absolute: ``{stack}_table.png`` (position × dimension) and ``{stack}_similarity.png``
    (cosine similarity of positions); relative: ``{stack}_bias.png`` (query × key bias, a
    panel per head) and ``{stack}_bias_by_distance.png``. ``positions.npz`` holds the arrays
    as ``{stack}.table`` etc. (see ``positions.position_arrays``).
    """
    out_dir = Path(out_dir)
    arrays: dict[str, np.ndarray] = {}
    pictures: list[str] = []
    for stack in ("encoder", "decoder"):
        module = getattr(model, stack, None)
        if module is None or not hasattr(module, "positional"):
            continue
        a = position_arrays(module.positional, n_positions)
        arrays.update({f"{stack}.{key}": value for key, value in a.items()})
        name = type(module.positional).__name__
        if "table" in a:
            p = a["table"].shape[0]
            plots.plot_matrix(a["table"], None, None, f"{stack}: {name}, first {p} positions",
                              out_dir / f"{stack}_table.png", xlabel="dimension", ylabel="position",
                              vmin=None, vmax=None, cmap="RdBu_r")
            plots.plot_matrix(a["similarity"], None, None, f"{stack}: cosine similarity of positions",
                              out_dir / f"{stack}_similarity.png", xlabel="position", ylabel="position",
                              vmin=-1.0, vmax=1.0, cmap="RdBu_r")
            pictures += [f"{stack}_table.png", f"{stack}_similarity.png"]
        else:
            pos = [str(i) for i in range(n_positions)]
            plots.plot_heads(a["bias"], pos, pos, f"{stack}: {name} (query × key)", out_dir / f"{stack}_bias.png",
                             max_tokens=n_positions, vmin=None, vmax=None)
            plots.plot_relative_bias(a["bias_by_distance"], a["distances"], f"{stack}: bias by distance",
                                     out_dir / f"{stack}_bias_by_distance.png")
            pictures += [f"{stack}_bias.png", f"{stack}_bias_by_distance.png"]
    if not arrays:
        raise ValueError(f"{type(model).__name__} has no encoder or decoder with a positional encoding")
    written = [plots.save_npz(out_dir / "positions.npz", arrays)] + [out_dir / p for p in pictures]
    written.append(plots.write_index(out_dir, "positional encodings", {"positions": pictures}))
    return written
