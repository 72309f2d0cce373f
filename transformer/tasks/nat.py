"""Non-autoregressive translation: a ``NonAutoregressiveModel`` trained to predict every target
token at once plus the target length, decoded in one pass, with a length beam, or with
Mask-Predict refinement.

Targets. The data module gives ``tgt_in`` = BOS + target and ``tgt_out`` = target + EOS. The NAT
target is the bare target (``tgt_in`` without its first column): no BOS, **no EOS**. The length
predictor already fixes where a sentence ends, so an EOS position would carry no information
and would only cost a decoder position per sentence (Gu et al. 2018 and Ghazvininejad et al.
2019 predict the bare target the same way). At decoding time BOS is banned and an output is
still cut at an EOS if the model ever emits one.

Decoder inputs (chosen by ``model.decoder_input``):

* ``copy`` (Gu et al. 2018): uniformly copied source embeddings; the loss covers every real
  target position.
* ``mask`` (Ghazvininejad et al. 2019, "Mask-Predict", sec. 4): for each sentence of length
  ``L`` a number ``n ~ Uniform{1..L}`` of positions is drawn, those positions are replaced by
  ``[MASK]``, and the token loss covers the masked positions only.

Glancing (``glancing``: ``ratio_start``, ``ratio_end``, ``anneal_steps``; GLAT, Qian et al.
2021), in either input mode: a first pass without gradient predicts every position from the
unrevealed inputs (all ``[MASK]``, or the copied source); ``floor(ratio × Hamming distance to the
target)`` positions, drawn uniformly among the real ones, then hold the gold token (its
embedding) in the second pass, whose token loss covers the other positions only. It replaces
Mask-Predict's random masking during training; validation keeps the random mask.

The length loss (cross-entropy over the model's length classes, as in Mask-Predict) is added
with weight ``length_loss_weight``. Logged: ``train/loss``, ``train/nll``,
``train/length_loss``, ``val/loss``, ``val/nll``, ``val/length_loss``, ``val/length_acc``
(exact-length accuracy of the top length class) and ``val/bleu`` (one-pass decoding unless
``val_decode`` names another NAT strategy).

Shape legend: B sentences, S source tokens, T target tokens, V vocabulary, L length classes.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer import kinds
from transformer.decoding import strategies
from transformer.decoding.settings import DecodeSettings
from transformer.inference import SearchFn
from transformer.tasks.build import build_model
from transformer.tasks.ctc_loss import nat_targets
from transformer.tasks.glancing import GlancingSchedule, reveal_counts, reveal_positions
from transformer.tasks.seq2seq import Seq2SeqTask
from transformer.tasks.translation import label_smoothed_nll
from transformer.ranges import Range

def random_mask(real: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Mask-Predict's training mask: per sentence ``n ~ Uniform{1..L}`` real positions.

    Args:
        real: ``(B, T)`` bool, True = real target position; ``L`` = its row sum.

    Returns:
        ``(B, T)`` bool, True = masked; exactly ``n`` real positions per row (none for an
        empty row), padding never masked.
    """
    lengths = real.sum(1)  # (B,)
    u = torch.rand(lengths.shape, device=real.device, generator=generator)  # (B,)
    n_mask = (u * lengths.float()).floor().long() + 1  # (B,) in 1..L
    n_mask = torch.minimum(n_mask, lengths)  # 0 for empty rows
    scores = torch.rand(real.shape, device=real.device, generator=generator)  # (B, T)
    scores = scores.masked_fill(~real, 2.0)  # padding sorts last
    ranks = scores.argsort(1).argsort(1)  # (B, T): rank of each position in a random order
    return ranks < n_mask.unsqueeze(1)  # (B, T) < (B, 1) -> (B, T)


class NATTranslationTask(Seq2SeqTask):
    """Training and decoding of a ``NonAutoregressiveModel`` (see module docstring).

    Args beyond ``Seq2SeqTask``'s:
        mask_id: the tokenizer's ``[MASK]`` id, given to the model in ``mask`` input mode.
        length_loss_weight: weight of the length cross-entropy in the total loss
            (Mask-Predict and fairseq's CMLM use 0.1).
        glancing: ``{"ratio_start", "ratio_end", "anneal_steps"}`` (``tasks.glancing``);
            None or both ratios 0: no glancing.
    """

    kind = kinds.NAT
    task_name = kind.name
    model_kind = strategies.NAT

    def __init__(self, mask_id: Annotated[int | None, Range(0, 2**24)] = None, length_loss_weight: float = 0.1,
                 glancing: dict | None = None, **shared: Any) -> None:
        schedule = GlancingSchedule.from_config(glancing)  # a bad schedule fails before the model is built
        super().__init__(**shared)
        self.glancing = schedule

    # ----------------------------------------------------------------- construction
    @property
    def decoder_input(self) -> str:
        """``"mask"`` or ``"copy"``, as the model config says (the model's own default: mask)."""
        return str(self.hparams.model.get("decoder_input", "mask"))

    def _build_model(self) -> torch.nn.Module:
        hp = self.hparams
        injected: dict[str, Any] = dict(vocab_size=hp.vocab_size, tgt_vocab_size=hp.tgt_vocab_size, pad_id=hp.pad_id)
        if self.decoder_input == "mask":
            if hp.mask_id is None:
                raise ValueError("a NAT model with decoder_input=mask needs the tokenizer's mask_id")
            injected["mask_id"] = hp.mask_id
        return build_model(hp.model, **injected)

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """``Seq2SeqTask``'s, plus the target tokenizer's ``[MASK]`` id."""
        return {**Seq2SeqTask.kwargs_from_datamodule(dm), "mask_id": dm.tgt_tokenizer.mask_id}

    # ----------------------------------------------------------------- training
    def forward(self, src: Tensor, tgt_tokens: Tensor, tgt_pad_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(logits (B, T, V), length_logits (B, L))``."""
        return self.model(src, tgt_tokens, tgt_pad_mask)

    def compute_losses(self, batch: dict, masked: Tensor | None = None, glance_ratio: float = 0.0,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Token and length losses of one batch.

        Args:
            batch: ``src (B, S)``, ``tgt_in (B, T + 1)`` from the data module.
            masked: ``(B, T)`` bool, positions to replace by ``[MASK]`` (mask mode only, ignored
                in copy mode); drawn with :func:`random_mask` when None and not glancing.
            glance_ratio: above 0, glancing training decides the positions instead (see the
                module docstring); ``generator`` draws the revealed positions.

        Returns:
            ``loss`` (token loss + weight * length loss), ``token_loss``, ``nll`` (per real
            token of the loss), ``length_loss``, ``length_acc`` (fraction of sentences whose
            most probable length is exact), ``n_tokens`` (tokens in the token loss),
            ``revealed`` (``(B, T)`` bool, the glanced positions, or None), ``length_logits (B, L)``.
        """
        hp = self.hparams
        target, real = nat_targets(batch["tgt_in"], hp.pad_id)  # (B, T), (B, T)
        enc = self.model.encode(batch["src"])
        revealed = None
        if glance_ratio > 0:
            revealed = self.glance(enc, target, real, glance_ratio, generator)
            masked = real & ~revealed
        elif self.decoder_input != "mask":
            masked = None  # copy inputs: every real position is scored
        elif masked is None:
            masked = random_mask(real)
        scored = real if masked is None else masked & real  # (B, T): the only positions projected to V
        tgt_tokens = target.masked_fill(scored, hp.mask_id) if self.decoder_input == "mask" else target
        logits = self.model.decode(enc, tgt_tokens, real, scored, revealed)  # (N, V)
        token_loss, nll = label_smoothed_nll(logits, target[scored], hp.label_smoothing, hp.pad_id)
        length_logits = self.model.predict_length(enc)  # (B, L)
        lengths = real.sum(1)  # (B,)
        length_loss = F.cross_entropy(length_logits.float(), self.model.length_targets(lengths, enc))
        predicted = self.model.lengths_from_logits(length_logits, enc)  # (B,)
        return {
            "loss": token_loss + hp.length_loss_weight * length_loss,
            "token_loss": token_loss,
            "nll": nll,
            "length_loss": length_loss,
            "length_acc": predicted.eq(lengths).float().mean(),
            "n_tokens": scored.sum(),
            "revealed": revealed,
            "length_logits": length_logits,
        }

    @torch.no_grad()
    def glance(self, enc, target: Tensor, real: Tensor, ratio: float,
               generator: torch.Generator | None = None) -> Tensor:
        """First pass on unrevealed inputs; ``(B, T)`` bool, the ``floor(ratio ×`` Hamming
        distance``)`` real positions per sentence whose gold token the second pass reads."""
        first_in = target.masked_fill(real, self.hparams.mask_id) if self.decoder_input == "mask" else target
        predicted = self.model.decode(enc, first_in, real).argmax(-1)  # (B, T, V) -> (B, T)
        errors = (predicted.ne(target) & real).sum(1)  # (B,)
        return reveal_positions(real, reveal_counts(errors, ratio), generator)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        ratio = self.glancing.ratio(self.global_step) if self.glancing.enabled else 0.0
        out = self.compute_losses(batch, glance_ratio=ratio)
        n_tokens, n_sents = int(out["n_tokens"]), batch["src"].size(0)
        if out["revealed"] is not None:
            self.log("train/glance_ratio", ratio, batch_size=n_sents)
            n_revealed = out["revealed"].sum()  # the real positions are the revealed and the scored ones
            self.log("train/revealed", n_revealed / (n_revealed + n_tokens).clamp(min=1), batch_size=n_sents)
        self.log("train/loss", out["loss"], prog_bar=True, batch_size=n_tokens)
        self.log("train/nll", out["nll"], batch_size=n_tokens)
        self.log("train/length_loss", out["length_loss"], batch_size=n_sents)
        self.log("train/length_acc", out["length_acc"], batch_size=n_sents)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return out["loss"]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        # A fixed mask per batch keeps val/loss comparable across epochs in mask mode.
        masked = None
        if self.decoder_input == "mask":
            gen = torch.Generator(device=batch["src"].device).manual_seed(batch_idx)
            masked = random_mask(nat_targets(batch["tgt_in"], self.hparams.pad_id)[1], gen)
        out = self.compute_losses(batch, masked)
        n_tokens, n_sents = int(out["n_tokens"]), batch["src"].size(0)
        self.log("val/loss", out["loss"], prog_bar=True, batch_size=n_tokens, sync_dist=True)
        self.log("val/nll", out["nll"], batch_size=n_tokens, sync_dist=True)
        self.log("val/length_loss", out["length_loss"], batch_size=n_sents, sync_dist=True)
        self.log("val/length_acc", out["length_acc"], prog_bar=True, batch_size=n_sents, sync_dist=True)
        if self._bleu_due():
            self._add_bleu_stats(batch)

    # ----------------------------------------------------------------- inference
    def search_fn(self, decode: DecodeSettings | Mapping[str, Any] | None, stats: dict | None = None) -> SearchFn:
        """Bind the non-autoregressive strategy ``decode`` names (``decoding.strategies``: one
        pass, a length beam or Mask-Predict) to this model. If ``stats`` is given,
        ``stats["avg_iterations"]`` is kept up to date: decoder passes per sentence over
        everything decoded so far.
        """
        cfg = DecodeSettings.of(decode)
        search = strategies.choose(cfg, self.model_kind).bind(self.model, cfg, self.search_ids())
        totals = [0, 0]  # sentences decoded, decoder passes summed over them

        def run(src: Tensor) -> list[list[tuple[list[int], float]]]:
            nbest, passes = search(src)
            totals[0] += len(nbest)
            totals[1] += sum(passes)
            if stats is not None:
                stats["avg_iterations"] = round(totals[1] / max(totals[0], 1), 3)
            return nbest

        return run
