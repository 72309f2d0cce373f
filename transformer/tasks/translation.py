"""Autoregressive translation: teacher-forced training of an ``EncoderDecoder`` with its loss
(label-smoothed cross-entropy, also the Mask-Predict task's token loss), greedy and beam search,
and ensembles of checkpoints. What it shares with the non-autoregressive tasks is
``tasks.seq2seq.Seq2SeqTask``.

Shape legend: B sentences, S source tokens, T target tokens, N real target tokens, D = d_model,
V vocabulary.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from transformer import kinds
from transformer.accel.cross_entropy import runs_on, smoothed_cross_entropy
from transformer.decoding import EnsembleModel, strategies
from transformer.decoding.compiled import compiled_decoding
from transformer.decoding.joint_ctc import JointCTCDecoding
from transformer.decoding.precision import decoding_model
from transformer.decoding.settings import DecodeSettings
from transformer.inference import SearchFn
from transformer.models.transformer import EncoderOut
from transformer.ranges import Probability, Range
from transformer.tasks.ctc_loss import ctc_alignment, ctc_losses, nat_targets
from transformer.tasks.seq2seq import Seq2SeqTask, frames_of_batch


# ----------------------------------------------------------------------------- the loss
def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy averaged over non-pad target tokens.

    The target distribution puts ``1 - epsilon`` on the gold token and spreads ``epsilon``
    uniformly over every class except PAD (Szegedy et al. 2016, as used by Vaswani et al.
    2017): PAD is never a prediction, so it gets no smoothing mass.

    Args:
        logits: (B, T, V) unnormalised scores.
        target: (B, T) gold ids; positions equal to ``pad_id`` (or -100) are ignored.
        epsilon: smoothing mass in [0, 1).
        pad_id: the padding id, excluded from the smoothing distribution; None if no PAD class.

    Returns:
        ``(loss, nll)``: the smoothed loss and the plain NLL, both means over real tokens.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    n_classes = lprobs.size(-1)
    real = target.ne(-100)
    if pad_id is not None:
        real &= target.ne(pad_id)
    safe_target = target.masked_fill(~real, 0)
    nll = -lprobs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    smooth_sum = -lprobs.sum(-1)  # (B, T)
    n_smooth = n_classes
    if pad_id is not None:
        smooth_sum = smooth_sum + lprobs[..., pad_id]
        n_smooth -= 1
    smooth = smooth_sum / n_smooth
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    n_real = real.sum().clamp_min(1)
    return (loss * real).sum() / n_real, (nll * real).sum() / n_real


def all_positions_loss(model: torch.nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                       label_smoothing: float, pad_id: int, **frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced ``(loss, nll)`` of one translation batch, means over the real target tokens.

    ``src (B, S)``, ``tgt_in``/``tgt_out (B, T)``. Every position goes through the model and the
    vocabulary projection and padded positions are ignored by the loss, so shapes depend only on
    ``(B, S, T)``: no boolean indexing, no host sync, one compiled graph per batch shape (what a
    GPU and ``torch.compile`` want). ``frames``: ``src_lengths (B,)`` of frames ``src (B, T, F)``
    (an input front end), or nothing for token ids; ``enc``: the batch's encoder output computed
    already (joint CTC training encodes once for both losses).
    """
    logits = model(src, tgt_in, **frames)  # (B, T, V)
    return label_smoothed_nll(logits, tgt_out, label_smoothing, pad_id)


def real_positions_loss(model: torch.nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                        label_smoothing: float, pad_id: int, **frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``all_positions_loss`` with only the N real target positions projected to the vocabulary.

    On a CPU the ``D -> V`` product, its softmax and their backward are the costliest
    per-position work and padding needs none of it; a boolean index costs no device sync there.
    The shapes depend on the data, so it suits eager CPU training, not a compiled step. Same
    loss and gradients as ``all_positions_loss``; on a CPU the loss runs by blocks of rows
    (``accel.cross_entropy``), never writing an ``(N, V)`` fp32 tensor.
    """
    real = tgt_out.ne(pad_id)  # (B, T)
    states = model.decoder_states(src, tgt_in, **frames)[real]  # (B, T, D) -> (N, D)
    logits = model.project(states)  # (N, V)
    loss = smoothed_cross_entropy if runs_on(logits) else label_smoothed_nll
    return loss(logits, tgt_out[real], label_smoothing, pad_id)


# The translation losses by the name ``task.loss`` gives.
TRANSLATION_LOSSES = {"all_positions": all_positions_loss, "real_positions": real_positions_loss}


def encoder_ctc_loss(model: torch.nn.Module, enc: EncoderOut, tgt_in: torch.Tensor, pad_id: int,
                     align: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CTC loss of a ``JointCTCEncoderDecoder``'s head over the encoder positions ``enc``, per
    target token it covers: the CTC task's targets (``tgt_in`` without its first token: no BOS,
    no EOS) and loss (``tasks.ctc_loss``; a sentence with fewer real encoder positions than it
    needs adds nothing); with ``align``, also the head's best path (``ctc_alignment``, ``(B, S)``:
    the target token each encoder position emits, -1 for none), else None."""
    target, real = nat_targets(tgt_in, pad_id)  # (B, L)
    log_probs = F.log_softmax(model.ctc_logits(enc).float(), dim=-1)  # (B, S, V)
    lengths = enc.src_pad_mask.sum(1)  # (B,)
    loss_sum, n_tokens, _ = ctc_losses(log_probs, lengths, target, real.sum(1), model.blank_id)
    path = ctc_alignment(log_probs, lengths, target, real.sum(1), model.blank_id) if align else None
    return loss_sum / n_tokens.clamp(min=1), path


def guided_attention_losses(model: torch.nn.Module, enc: EncoderOut, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                            path: torch.Tensor, label_smoothing: float,
                            pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, nll, guide)``: the decoder's teacher-forced losses (as ``all_positions_loss``) and
    how far the first head of its last cross-attention is from where the CTC head emits each
    token: the mean over target tokens j of ``-log`` (the weight decoder row j, which writes token
    j, puts on the encoder positions whose CTC path ``path (B, S)`` emits token j). Tokens the path
    does not place (an unaligned sentence) are left out."""
    logits, weights = model.decoder(tgt_in, enc.memory, enc.src_pad_mask, model._target_mask(tgt_in),
                                    need_weights=True)  # (B, T, V), per layer (self, cross (B, H, T, S))
    loss, nll = label_smoothed_nll(logits, tgt_out, label_smoothing, pad_id)
    n_tokens = tgt_in.size(1) - 1  # rows 0 .. L-1 write the tokens, the last one EOS
    cross = weights[-1][1][:, 0, :n_tokens].float()  # (B, L, S)
    emits = path.unsqueeze(1) == torch.arange(n_tokens, device=path.device).view(1, -1, 1)  # (B, L, S)
    placed = emits.any(-1)  # (B, L)
    mass = (cross * emits).sum(-1).clamp(min=1e-6)  # (B, L)
    guide = -(mass.log() * placed).sum() / placed.sum().clamp(min=1)
    return loss, nll, guide


def frames_length_cap(cfg: DecodeSettings, data: Mapping[str, Any]) -> DecodeSettings:
    """The length cap ``floor(max_len_a * source length + max_len_b)`` for a source of audio
    frames: its ``max_len_a`` per frame, so that the source length it counts is the pieces the
    recording's duration holds at the training transcripts' highest rate (``data``'s
    ``pieces_per_second``, ``data.speech.datamodule.transcript_rate``), not its frames (100 a
    second: a 3-second string of 7 digits would otherwise allow 370 steps)."""
    from transformer.data.speech.datamodule import DEFAULT_PIECES_PER_SECOND, feature_settings

    rate = float(data.get("pieces_per_second") or DEFAULT_PIECES_PER_SECOND)
    seconds_per_frame = feature_settings(dict(data)).hop_ms / 1000
    return cfg.replace(max_len_a=cfg.max_len_a * rate * seconds_per_frame)


# ----------------------------------------------------------------------------- the task
class TranslationTask(Seq2SeqTask):
    """Teacher forcing with label-smoothed cross-entropy (see :class:`Seq2SeqTask` for the
    settings every translation task shares).

    Decoder input is BOS + target and the gold output is target + EOS, both built by the data
    module (``tgt_in`` / ``tgt_out``). Logged: ``train/loss``, ``train/nll``, ``lr``,
    ``val/loss``, ``val/bleu`` (greedy, sacreBLEU statistics summed over all ranks; every
    ``val_bleu_every`` epochs, NaN in between; a multilingual model's also ``val/bleu/<src>-<tgt>``
    per direction; a transcript model's, speech in, also ``val/wer``).

    Args beyond ``Seq2SeqTask``'s:
        loss: the loss every training and validation step computes (:data:`TRANSLATION_LOSSES`):
            ``all_positions`` projects every target position to the vocabulary (fixed shapes,
            for a GPU or a compiled step), ``real_positions`` only the non-padded ones (eager
            CPU training); both give the same value and gradients.
        compile: run the training and validation loss through ``torch.compile``, with
            ``compile_mode`` (``default``, ``reduce-overhead`` for CUDA graphs,
            ``max-autotune``); the checkpoint and its state-dict keys are the same either way.
        ctc_weight: w of joint CTC-attention training (Watanabe et al. 2017): the loss is
            ``w * CTC + (1 - w) * cross-entropy``, the CTC loss that of the model's CTC head over
            the encoder positions (``models.JointCTCEncoderDecoder``; ESPnet's usual w is 0.3),
            logged as ``train/ctc`` and ``val/ctc``. 0 (the default): the cross-entropy alone, as
            for a plain ``EncoderDecoder``; above 0 the model must have the head.
        attention_guide: g, with ``ctc_weight`` above 0: ``g`` times ``guided_attention_losses``'
            guide is added to the loss (logged as ``train/guide`` and ``val/guide``): one head of
            the decoder's last cross-attention learns to read, for each token it writes, the
            encoder positions where the CTC head's best path emits that token. The decoder must
            then know where it is in the recording, which content alone cannot tell when a
            token repeats. Training only: the model and its search are unchanged. 0: off.
    """

    kind = kinds.TRANSLATION
    task_name = kind.name
    model_kind = strategies.AUTOREGRESSIVE

    def __init__(self, loss: str = "all_positions", compile: bool = False, compile_mode: str = "default",
                 ctc_weight: Annotated[float, Probability()] = 0.0,
                 attention_guide: Annotated[float, Range(0.0, 100.0)] = 0.0, **shared: Any) -> None:
        if loss not in TRANSLATION_LOSSES:
            raise ValueError(f"task.loss must be one of {sorted(TRANSLATION_LOSSES)}, got {loss!r}")
        super().__init__(**shared)
        self.ctc_weight = float(ctc_weight)
        if self.ctc_weight > 0 and not hasattr(self.model, "ctc_logits"):
            raise ValueError(f"task.ctc_weight={ctc_weight} needs a CTC head on the encoder: "
                             f"model._target_=transformer.models.JointCTCEncoderDecoder "
                             f"(this model is a {type(self.model).__name__})")
        self.attention_guide = float(attention_guide)
        if self.attention_guide > 0 and self.ctc_weight == 0:
            raise ValueError(f"task.attention_guide={attention_guide} follows the CTC head's alignment: "
                             f"it needs task.ctc_weight > 0 (and the model's CTC head)")
        loss_fn = TRANSLATION_LOSSES[loss]
        self.loss_fn = torch.compile(loss_fn, mode=compile_mode) if compile else loss_fn

    @classmethod
    def ensemble(cls, tasks: Sequence["TranslationTask"]) -> "TranslationTask":
        """One task whose search averages the probabilities of ``tasks``' models
        (``decoding.ensemble.EnsembleModel``); it keeps the first task's settings.

        For decoding and evaluation only: the members must be autoregressive translation tasks
        with the same language pair, tokenizers, special ids and ``data.tag_side``, else a ``ValueError`` names
        the first difference.
        """
        first = tasks[0]
        if len(tasks) == 1:
            return first
        kinds.require_ensemble(tasks, cls.kind)
        for i, task in enumerate(tasks[1:], start=2):
            for key in ("src_lang", "tgt_lang", "pad_id", "bos_id", "eos_id"):
                if task.hparams[key] != first.hparams[key]:
                    raise ValueError(f"ensemble member {i} has {key}={task.hparams[key]!r}, "
                                     f"member 1 has {first.hparams[key]!r}")
            if task.languages.tag_side != first.languages.tag_side:  # where each reads its target tag
                raise ValueError(f"ensemble member {i} has data.tag_side={task.languages.tag_side}, "
                                 f"member 1 has {first.languages.tag_side}")
            for side, ours, theirs in (("src", task.src_tokenizer, first.src_tokenizer),
                                       ("tgt", task.tgt_tokenizer, first.tgt_tokenizer)):
                if ours.to_str() != theirs.to_str():
                    raise ValueError(f"ensemble member {i} has a different {side} tokenizer from member 1; "
                                     f"members must share their vocabulary")
        lengths = [t.max_len for t in tasks if t.max_len is not None]
        first.model = EnsembleModel([t.model for t in tasks])
        first.max_len = min(lengths) if lengths else None
        return first

    # ----------------------------------------------------------------- training
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)``."""
        return self.model(src, tgt_in, **({} if src_lengths is None else {"src_lengths": src_lengths}))

    def _loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
        """``(loss, nll, n_tokens, ctc)``: ``ctc`` is the CTC head's loss (None when
        ``ctc_weight`` is 0), already mixed into ``loss`` (as the attention guide, logged here);
        ``nll`` is the decoder's."""
        hp = self.hparams
        inputs, ctc = frames_of_batch(batch), None
        if self.ctc_weight > 0:
            inputs["enc"] = self.model.encode(batch["src"], **inputs)  # one encoder pass for both losses
            ctc, path = encoder_ctc_loss(self.model, inputs["enc"], batch["tgt_in"], hp.pad_id,
                                         align=self.attention_guide > 0)
        if self.attention_guide > 0:
            loss, nll, guide = guided_attention_losses(self.model, inputs["enc"], batch["tgt_in"], batch["tgt_out"],
                                                       path, hp.label_smoothing, hp.pad_id)
            self.log(f"{'train' if self.training else 'val'}/guide", guide, batch_size=batch["tgt_in"].size(0))
        else:
            loss, nll = self.loss_fn(self.model, batch["src"], batch["tgt_in"], batch["tgt_out"],
                                     hp.label_smoothing, hp.pad_id, **inputs)
        if self.ctc_weight > 0:
            loss = self.ctc_weight * ctc + (1.0 - self.ctc_weight) * loss
        if self.attention_guide > 0:
            loss = loss + self.attention_guide * guide
        # The collator counts real target tokens on the host; counting here would sync.
        n_tokens = batch["n_tokens"] if "n_tokens" in batch else int(batch["tgt_out"].ne(hp.pad_id).sum())
        return loss, nll, n_tokens, ctc

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, nll, n_tokens, ctc = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=n_tokens)
        self.log("train/nll", nll, batch_size=n_tokens)
        if ctc is not None:
            self.log("train/ctc", ctc, batch_size=n_tokens)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss, nll, n_tokens, ctc = self._loss(batch)
        self.log("val/loss", loss, prog_bar=True, batch_size=n_tokens, sync_dist=True)
        self.log("val/nll", nll, batch_size=n_tokens, sync_dist=True)
        if ctc is not None:
            self.log("val/ctc", ctc, batch_size=n_tokens, sync_dist=True)
        if self._bleu_due():
            self._add_bleu_stats(batch)

    # ----------------------------------------------------------------- inference
    def search_fn(self, decode: DecodeSettings | Mapping[str, Any] | None, stats: dict | None = None) -> SearchFn:
        """Bind the autoregressive strategy ``decode`` names (``decoding.strategies``) to this
        model with its settings (``stats``: none to keep); a front end's frames come with their
        ``src_lengths``."""
        cfg = DecodeSettings.of(decode)
        strategy = strategies.choose(cfg, self.model_kind)
        frames = kinds.input_kind(self.hparams)
        if frames.frontend is not None and (cfg.compile or cfg.dtype != "fp32"):
            # the compiled and bf16 programs are traced over token ids
            raise ValueError(f"decode.compile=true and decode.dtype=bf16 apply to token ids; a {frames.name} input "
                             f"decodes eagerly in fp32 (set decode.compile=false decode.dtype=fp32)")
        if frames.frontend is not None:
            cfg = frames_length_cap(cfg, self.hparams.data)
        model = decoding_model(self.model, cfg.dtype)  # a bf16 copy for decode.dtype=bf16
        if cfg.ctc_weight > 0:  # joint CTC/attention scores (Watanabe et al. 2017), a model with a CTC head
            if cfg.compile:
                raise ValueError("decode.ctc_weight > 0 searches eagerly: set decode.compile=false")
            model = JointCTCDecoding(model, cfg.ctc_weight, self.hparams.eos_id)
        if cfg.compile:
            model = compiled_decoding(model, next(model.parameters()).device)
        search = strategy.bind(model, cfg, self.search_ids())

        def run(src: torch.Tensor, start: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None):
            return search(src, start=start, **({} if src_lengths is None else {"src_lengths": src_lengths}))[0]
        return run
