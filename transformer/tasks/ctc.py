"""Non-autoregressive translation with CTC: a ``CTCNonAutoregressiveModel`` trained with the CTC
loss over its upsampled decoder positions, optionally with glancing, decoded in one pass.

Targets. As for ``tasks.nat``: the bare target (``tgt_in`` without BOS), no EOS; the output
length is whatever the collapsed path gives, so there is no length loss.

Loss. ``F.ctc_loss`` (log-softmax in fp32, ``zero_infinity``) summed over sentences and divided
by the number of target tokens it covers (``train/nll``). A sentence whose decoder input is
too short for its target (``λ S_b`` below the target length plus its repeated neighbours) has no
alignment: its loss is zeroed rather than infinite, its tokens leave the count, and the number
of such sentences is logged (``train/ctc_infeasible``). With ``label_smoothing`` ε > 0 the loss
is ``(1 - ε) CTC + ε`` times the mean negative log-probability over the vocabulary at the real
decoder positions (the usual smoothing for CTC-based NAT, e.g. fairseq's NAT-CTC criterion).

Glancing (``glancing``: ``ratio_start``, ``ratio_end``, ``anneal_steps``; Gu & Kong 2021, sec.
3.3). A first pass without gradient gives the argmax path and the CTC loss's best alignment
(``tasks.glancing.ctc_best_alignment``); ``floor(ratio × Hamming distance)`` decoder positions,
drawn uniformly among the real ones, read the alignment's token (or blank) embedding in the
second pass. The loss stays the CTC loss over the whole target: a revealed position is one
alignment's choice, not a target token, and the CTC loss sums over every alignment, so there is
no per-token term to drop (Gu & Kong keep the full CTC loss for the same reason). Validation
never glances.

Logged: ``train/loss``, ``train/nll``, ``train/ctc_infeasible``, ``train/glance_ratio`` and
``train/revealed`` (fraction of decoder positions revealed) when glancing; ``val/loss``,
``val/nll``, ``val/ctc_infeasible``, ``val/bleu`` (one pass; speech in, also ``val/wer``).

Shape legend: B sentences, S source tokens, U = λ·S decoder positions, L target tokens,
V vocabulary.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer import kinds
from transformer.decoding import strategies
from transformer.decoding.settings import DecodeSettings
from transformer.inference import SearchFn
from transformer.inference.shortlist import restrict_output, shortlist_ids
from transformer.tasks.build import build_model
from transformer.tasks.glancing import (
    GlancingSchedule,
    ctc_best_alignment,
    reveal_counts,
    reveal_positions,
)
from transformer.tasks.ctc_loss import ctc_losses, nat_targets
from transformer.tasks.seq2seq import Seq2SeqTask
from transformer.ranges import Probability, Range

log = logging.getLogger(__name__)

# The checkpoint key of the training targets' token ids (CTCTranslationTask.output_vocab).
OUTPUT_VOCAB_KEY = "output_vocab"


class CTCTranslationTask(Seq2SeqTask):
    """Training and decoding of a ``CTCNonAutoregressiveModel`` (see module docstring).

    Args beyond ``Seq2SeqTask``'s:
        mask_id: the tokenizer's ``[MASK]`` id, the model's CTC blank.
        glancing: ``{"ratio_start", "ratio_end", "anneal_steps"}`` (``GlancingSchedule``);
            None or both ratios 0 disable glancing.
        label_smoothing: ε of the smoothing term (see module docstring; 0 disables).
    """

    kind = kinds.CTC
    task_name = kind.name
    model_kind = strategies.CTC

    def __init__(self, mask_id: Annotated[int | None, Range(0, 2**24)] = None, glancing: dict | None = None,
                 label_smoothing: Annotated[float, Probability()] = 0.0, **shared: Any) -> None:
        if mask_id is None:
            raise ValueError("a CTC model needs the tokenizer's mask_id (its blank)")
        schedule = GlancingSchedule.from_config(glancing)  # a bad schedule fails before the model is built
        super().__init__(label_smoothing=label_smoothing, **shared)
        self.glancing = schedule
        # The training targets' distinct token ids, recorded at the start of training and kept
        # in the checkpoint (OUTPUT_VOCAB_KEY): decode.shortlist=train scores only these.
        self.output_vocab: list[int] | None = None
        self._warned_no_vocab = False
        # The decoder has λ positions per source token: longer sources would run past max_len.
        if self.max_len is not None:
            self.max_len = int(int(self.max_len) // self.model.upsample_ratio)

    def _build_model(self) -> torch.nn.Module:
        hp = self.hparams
        return build_model(hp.model, vocab_size=hp.vocab_size, tgt_vocab_size=hp.tgt_vocab_size,
                           pad_id=hp.pad_id, blank_id=hp.mask_id)

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """``Seq2SeqTask``'s, plus the target tokenizer's ``[MASK]`` id (the blank)."""
        return {**Seq2SeqTask.kwargs_from_datamodule(dm), "mask_id": dm.tgt_tokenizer.mask_id}

    # ----------------------------------------------------------------- the output vocabulary
    def on_fit_start(self) -> None:
        dm = self.trainer.datamodule
        if self.output_vocab is None and hasattr(dm, "target_ids"):
            self.output_vocab = dm.target_ids("train")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.output_vocab is not None:
            checkpoint[OUTPUT_VOCAB_KEY] = list(self.output_vocab)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.output_vocab = self._checked_vocab(checkpoint.get(OUTPUT_VOCAB_KEY))

    @classmethod
    def from_checkpoint_dict(cls, ckpt: dict) -> "CTCTranslationTask":
        task = super().from_checkpoint_dict(ckpt)
        task.output_vocab = task._checked_vocab(ckpt.get(OUTPUT_VOCAB_KEY))
        return task

    def _checked_vocab(self, ids) -> list[int] | None:
        """A checkpoint's recorded output vocabulary: None, or ids of this model's vocabulary."""
        if ids is None:
            return None
        size = self.model.vocab_size
        if not isinstance(ids, list) or not ids or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < size for i in ids):
            raise ValueError(f"{OUTPUT_VOCAB_KEY}: expected a non-empty list of token ids below {size}")
        return ids

    def shortlist(self, value: str) -> Tensor | None:
        """The ids ``decode.shortlist`` names: ``train`` (the recorded training targets' ids) or
        a target-side text file's. A model that records none (trained without a translation
        datamodule) decodes ``train`` over every id, and says so once."""
        if value != "train":
            return shortlist_ids(value, self.tgt_tokenizer)
        if self.output_vocab is None:
            if not self._warned_no_vocab:
                log.warning("decode.shortlist=train: this model records no training-target vocabulary; "
                            "scoring every id (give a target-side text file to cut the projection)")
                self._warned_no_vocab = True
            return None
        return torch.tensor(self.output_vocab, dtype=torch.long)

    # ----------------------------------------------------------------- training
    def forward(self, src: Tensor, src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(logits (B, U, V), decoder_mask (B, U))`` (``src_lengths``: of frames ``src (B, T, F)``)."""
        return self.model(src, src_lengths)

    def compute_losses(self, batch: dict, glance_ratio: float = 0.0,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """CTC loss of one batch, glancing with ``glance_ratio`` when it is above 0.

        Returns ``loss``, ``nll`` (CTC negative log-likelihood per covered target token),
        ``n_tokens``, ``n_infeasible``, ``revealed`` (fraction of real decoder positions
        revealed; 0 without glancing).
        """
        hp = self.hparams
        target, real = nat_targets(batch["tgt_in"], hp.pad_id)  # (B, L)
        tgt_lengths = real.sum(1)  # (B,)
        enc = self.model.encode(batch["src"], batch.get("src_lengths"))  # frames carry their lengths
        dec_mask = self.model.decoder_mask(enc)  # (B, U)
        in_lengths = dec_mask.sum(1)  # (B,)
        glance_tokens = reveal = None
        if glance_ratio > 0:
            glance_tokens, reveal = self.glance(enc, dec_mask, target, tgt_lengths, glance_ratio, generator)
        log_probs = F.log_softmax(self.model.decode(enc, glance_tokens, reveal).float(), dim=-1)  # (B, U, V)
        loss_sum, n_tokens, n_infeasible = ctc_losses(log_probs, in_lengths, target, tgt_lengths, hp.mask_id)
        nll = loss_sum / n_tokens.clamp(min=1)
        loss = nll
        if hp.label_smoothing > 0:
            smooth = -log_probs.mean(-1).masked_fill(~dec_mask, 0.0).sum() / dec_mask.sum().clamp(min=1)
            loss = (1.0 - hp.label_smoothing) * nll + hp.label_smoothing * smooth
        revealed = torch.zeros((), device=loss.device) if reveal is None else reveal.sum() / dec_mask.sum()
        return {"loss": loss, "nll": nll, "n_tokens": n_tokens, "n_infeasible": n_infeasible, "revealed": revealed}

    @torch.no_grad()
    def glance(self, enc, dec_mask: Tensor, target: Tensor, tgt_lengths: Tensor, ratio: float,
               generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """First pass: the best alignment ``(B, U)`` and the positions ``(B, U)`` bool to reveal
        (``floor(ratio ×`` the argmax path's Hamming distance to the alignment``)`` per sentence;
        none for a sentence without an alignment)."""
        log_probs = F.log_softmax(self.model.decode(enc).float(), dim=-1)  # (B, U, V)
        align, feasible = ctc_best_alignment(log_probs, dec_mask.sum(1), target, tgt_lengths,
                                             self.hparams.mask_id, self.hparams.pad_id)
        usable = dec_mask & feasible.unsqueeze(1)  # (B, U)
        errors = (log_probs.argmax(-1).ne(align) & usable).sum(1)  # (B,)
        reveal = reveal_positions(usable, reveal_counts(errors, ratio), generator)
        return align.masked_fill(~usable, self.hparams.pad_id), reveal

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        ratio = self.glancing.ratio(self.global_step) if self.glancing.enabled else 0.0
        out = self.compute_losses(batch, ratio)
        n_tokens, n_sents = int(out["n_tokens"]), batch["src"].size(0)
        self.log("train/loss", out["loss"], prog_bar=True, batch_size=n_tokens)
        self.log("train/nll", out["nll"], batch_size=n_tokens)
        self.log("train/ctc_infeasible", out["n_infeasible"].float(), reduce_fx="sum", batch_size=n_sents)
        if self.glancing.enabled:
            self.log("train/glance_ratio", ratio, batch_size=n_sents)
            self.log("train/revealed", out["revealed"], batch_size=n_sents)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return out["loss"]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        out = self.compute_losses(batch)
        n_tokens, n_sents = int(out["n_tokens"]), batch["src"].size(0)
        self.log("val/loss", out["loss"], prog_bar=True, batch_size=n_tokens, sync_dist=True)
        self.log("val/nll", out["nll"], batch_size=n_tokens, sync_dist=True)
        self.log("val/ctc_infeasible", out["n_infeasible"].float(), reduce_fx="sum", batch_size=n_sents,
                 sync_dist=True)
        if self._bleu_due():
            self._add_bleu_stats(batch)

    # ----------------------------------------------------------------- inference
    def search_fn(self, decode: DecodeSettings | Mapping[str, Any] | None, stats: dict | None = None) -> SearchFn:
        """Bind the CTC strategy ``decode`` names (``decoding.strategies``: best-path decoding or
        prefix beam search) to this model; a strategy that reads ``shortlist`` (``train`` or a
        target-side text file) scores only its tokens and the blank (``inference.shortlist``).
        ``stats["avg_iterations"]`` (always 1.0) is kept for the NAT reports."""
        cfg = DecodeSettings.of(decode)
        strategy = strategies.choose(cfg, self.model_kind)
        model = self.model
        ids = self.shortlist(cfg.shortlist) if cfg.shortlist and "shortlist" in strategy.keys else None
        if ids is not None:
            model = restrict_output(model, ids)
        search = strategy.bind(model, cfg, self.search_ids())

        def run(src: Tensor, src_lengths: Tensor | None = None) -> list[list[tuple[list[int], float]]]:
            nbest, _ = search(src, **({} if src_lengths is None else {"src_lengths": src_lengths}))
            if stats is not None:
                stats["avg_iterations"] = 1.0
            return nbest

        return run
