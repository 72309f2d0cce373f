"""Part-of-speech tagging: a ``Tagger`` trained on gold-tokenized words, with word-level
cross-entropy (plus optional auxiliary tags, word/piece dropout and adversarial inputs),
validation accuracy, and the checkpoint that tags and evaluates on its own.

Shape legend: B sentences, T subword pieces, W words (max in batch), C tags.

The checkpoint carries everything needed to tag new text: the resolved model config and
tag list (hyperparameters), the tokenizer (``checkpoint["tokenizers"]["src"]``, the same
entry translation uses, so ``transformer-train ckpt_path=...`` resumes with it) and the
set of training word forms (``checkpoint["tagging"]["train_words"]``) so that accuracy on
words never seen in training can be reported from the checkpoint alone. Tagging raw words
is :meth:`TaggingTask.tagger` (``inference.tagger``), scoring a split ``evaluation.tagging``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Sequence

import lightning as L
import torch
import torch.nn.functional as F

from transformer import kinds
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.tagged.corpus import tag_field
from transformer.evaluation.tagging import evaluate_tagging
from transformer.inference.tagger import WordTagger, model_max_len
from transformer.models.tagger_ensemble import TaggerEnsemble, TaggerSpec, check_tagger_ensemble
from transformer.tasks.adversarial import InputCapture, adversarial_shift, check_eps
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import OneTokenizerCheckpoint
from transformer.tasks.build import ADAMW, optimizer_with_warmup
from transformer.ranges import Probability, Range

IGNORE_INDEX = -100


def tagging_loss(logits: torch.Tensor, tags: torch.Tensor, label_smoothing: float = 0.0) -> tuple[torch.Tensor, int]:
    """Mean cross-entropy over real words.

    Args:
        logits: ``(B, W, C)`` one score vector per *word* (pieces were already pooled, so a
            word's second and later pieces carry no label of their own).
        tags: ``(B, W')`` gold tag ids, ``-100`` for padding; ``W'`` may differ from ``W``
            (the model sizes W by the longest sentence's pieces, the collator by its words):
            both are cut or padded to a common width, padding never counts. An id ``>= C``
            is a dev/test tag outside the training tag set: no class to score it against, so
            it is left out of the loss (and counted as an error by accuracy).
        label_smoothing: as in ``F.cross_entropy``.

    Returns:
        ``(loss, n_words)``: a scalar (0 when the batch has no real word) and the word count.
    """
    logits, tags = align_word_dims(logits, tags)
    tags = tags.masked_fill(tags.ge(logits.size(-1)), IGNORE_INDEX)  # (B, W): unknown tags out of the loss
    n_words = int(tags.ne(IGNORE_INDEX).sum())
    if n_words == 0:
        return logits.sum() * 0.0, 0
    loss = F.cross_entropy(
        logits.float().transpose(1, 2),  # (B, C, W): class dim second, as cross_entropy wants
        tags, ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing,
    )
    return loss, n_words


def align_word_dims(logits: torch.Tensor, tags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut or pad ``logits (B, W, C)`` / ``tags (B, W')`` to the same word width."""
    w, w_tags = logits.size(1), tags.size(1)
    if w_tags < w:
        tags = F.pad(tags, (0, w - w_tags), value=IGNORE_INDEX)  # (B, W)
    elif w_tags > w:
        # Words beyond the model's W have no piece at all; they cannot be real here
        # (encode_words gives every word a piece), so they are padding.
        tags = tags[:, :w]
    return logits, tags


def drop_words(src: torch.Tensor, word_ids: torch.Tensor, p: float, unk_id: int,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Word dropout: replace every piece of a randomly chosen ``p`` fraction of words by
    ``unk_id`` (the word keeps its piece count, so ``word_ids`` stays valid).

    A tagger trained on 70k words memorises frequent forms; hiding whole words forces it to
    tag from context, which is all it has for a word never seen in training (word dropout,
    Iyyer et al. 2015; Kiperwasser & Goldberg 2016 for taggers/parsers).

    Shapes: ``src (B, T)``, ``word_ids (B, T)`` (-1 = padding) -> ``(B, T)``.
    """
    n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
    if n_words <= 0 or p <= 0:
        return src
    hit = torch.rand(src.size(0), n_words, generator=generator, device=src.device) < p  # (B, W)
    piece_hit = hit.gather(1, word_ids.clamp(min=0)) & word_ids.ge(0)  # (B, T)
    return src.masked_fill(piece_hit, unk_id)


class TaggingTask(OneTokenizerCheckpoint, L.LightningModule):
    """Per-word cross-entropy over a ``Tagger``; AdamW with warm-up.

    Logged: ``train/loss``, ``lr``, ``val/loss``, ``val/acc`` (token accuracy over real
    words, exact: per-batch accuracies weighted by word count).

    Args:
        model: resolved model config (``_target_`` a ``Tagger``); ``vocab_size``
            (= ``piece_vocab_size``), ``pad_id`` and ``n_tags`` are injected here.
        piece_vocab_size: the tokenizer's real size. Not called ``vocab_size``: the data
            module's ``vocab_size`` hyperparameter is the *requested* size, and Lightning
            refuses to log two different values under one key.
        tags: tag strings; id ``i`` is ``tags[i]``.
        data: the corpus (``TaggingDataModule.corpus``: ``{"name", "format", "files",
            "dev_size", "tagset", "aux_tagset"}``); a preset's name alone finds its files.
        label_smoothing, lr: loss and peak learning rate.
        optimizer: a ``_partial_`` node of ``tasks.build.OPTIMIZERS``; None: AdamW,
            betas (0.9, 0.98), eps 1e-8, weight decay 0.01 (:data:`default_optimizer`).
        warmup_steps: linear warm-up length in updates.
        warmup: the warm-up as a fraction of the run's updates (``0.06``: the first 6 %, from
            the trainer's estimate of the run's length); set, it replaces ``warmup_steps``.
        schedule: ``"linear"`` (decay to 0 at the trainer's last step) or ``"inverse_sqrt"``.
        word_dropout: in training, the probability that all pieces of a word are replaced
            by ``<unk>`` (see :func:`drop_words`); the character encoder then has no spelling
            for it either.
        piece_dropout: in training, the probability that a word's pieces are replaced by
            ``<unk>`` while the character encoder still spells it: how a word never seen in
            training looks (its pieces' embeddings barely trained, its spelling informative).
        aux_tags: tag strings of an auxiliary tag set of the same words (the data module's
            ``aux_tagset``, e.g. XPOS beside UPOS), predicted by a second classifier over
            the same encoder (multi-task training); ``None``: none. Tagging and evaluation
            report both heads.
        aux_weight: the auxiliary loss's weight in the training loss
            (``loss = main + aux_weight * aux``); ``val/loss`` is the main loss alone and
            ``val/aux_acc`` the auxiliary tags' accuracy.
        adversarial_eps: > 0 adds adversarial training (Goodfellow et al. 2015; for taggers
            Yasunaga et al. 2018): each batch is also scored with its encoder input vectors
            moved in the direction that raises the training loss most (its gradient), by
            ``adversarial_eps`` times the sentence's own input norm, and that loss is added
            (logged as ``train/adv_loss``). About twice the training time; 0 = off.
        layer_decay: below 1, each encoder layer below the top trains at this factor of the
            rate above it (layer-wise decay, for fine-tuning a pretrained encoder: ``init_from``;
            ``tasks.build.layer_decay_groups``); 1.0 = one rate.
        tokenizer: the tokenizer JSON (``SubwordTokenizer.to_str``); kept out of hparams.
        train_words: training word forms (for unseen-word accuracy); kept out of hparams.
    """

    kind = kinds.TAGGING

    task_name = kind.name
    default_optimizer = ADAMW

    def __init__(
        self,
        model: dict,
        piece_vocab_size: Annotated[int, Range(1, 2**24)],
        pad_id: Annotated[int, Range(0, 2**24)],
        tags: Sequence[str],
        data: dict,
        label_smoothing: Annotated[float, Probability()] = 0.0,
        lr: Annotated[float, Range(0, 10)] = 5e-4,
        optimizer: dict | None = None,
        warmup_steps: Annotated[int, Range(0, 2**40)] = 500,
        warmup: Annotated[float | None, Range(0, 1)] = None,
        schedule: str = "linear",
        word_dropout: Annotated[float, Probability()] = 0.0,
        piece_dropout: Annotated[float, Probability()] = 0.0,
        aux_tags: Sequence[str] | None = None,
        aux_weight: float = 0.5,
        adversarial_eps: float = 0.0,
        layer_decay: float = 1.0,
        tokenizer: str | None = None,
        train_words: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if schedule not in ("linear", "inverse_sqrt"):
            raise ValueError(f"schedule must be 'linear' or 'inverse_sqrt', got {schedule!r}")
        if not 0 < layer_decay <= 1:
            raise ValueError(f"task.layer_decay={layer_decay!r}: expected a factor in (0, 1] (1.0 = off)")
        check_eps(adversarial_eps)
        self.save_hyperparameters(ignore=["tokenizer", "train_words"])
        self.tags = list(tags)
        self.aux_tags = list(aux_tags) if aux_tags else []
        self.model = build_model(model, vocab_size=piece_vocab_size, pad_id=pad_id, n_tags=len(self.tags),
                                 n_aux_tags=len(self.aux_tags) or None)
        self.tokenizer: SubwordTokenizer | None = SubwordTokenizer.from_str(tokenizer) if tokenizer else None
        if self.tokenizer is not None and hasattr(self.model, "set_pieces"):
            # The character encoder (if any) spells words through each piece's string.
            tok = self.tokenizer
            specials = {tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id, tok.mask_id}
            self.model.set_pieces([tok.id_to_token(i) for i in range(piece_vocab_size)], specials)
        self.train_words: set[str] | None = set(train_words) if train_words is not None else None

    # ----------------------------------------------------------------- construction
    @classmethod
    def ensemble(cls, tasks: Sequence["TaggingTask"]) -> "TaggingTask":
        """One tagger that gives each word the mean of ``tasks``' tag probabilities (each member
        reads the words with its own tokenizer; ``models.tagger_ensemble``); it keeps the first
        task's settings and training words (unseen-word accuracy), so ``tagger`` and
        ``evaluate`` score the ensemble.

        For tagging and evaluation only. The members must be tagging checkpoints of the same
        dataset and tag set with the same tag inventory, else a ``ValueError`` names the first
        difference. The auxiliary head (e.g. XPOS beside UPOS) is averaged too when every member
        has the same one; otherwise the ensemble predicts the main tags only.
        """
        first = tasks[0]
        if len(tasks) == 1:
            return first
        kinds.require_ensemble(tasks, cls.kind)
        if not check_tagger_ensemble([TaggerSpec(t.hparams.data, t.tags, t.aux_tags) for t in tasks]):
            first.aux_tags = []  # the members' auxiliary heads differ: main tags only
        first.model = TaggerEnsemble([(t.model, t.tokenizer, t.encoder_max_len()) for t in tasks])
        return first

    @property
    def tagset(self) -> str:
        """``upos``, ``xpos`` or ``chunk``: which annotation the tags are (CoNLL-U column)."""
        return tag_field(self.hparams.data)

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``TaggingDataModule``."""
        tok = dm.tokenizer
        train = dm.raw("train")
        return dict(
            piece_vocab_size=tok.vocab_size,
            pad_id=tok.pad_id,
            tags=list(dm.tag_vocab),
            aux_tags=list(dm.aux_tag_vocab) or None,
            data=dm.corpus,
            tokenizer=tok.to_str(),
            train_words=sorted({w for s in train for w in s.words}),
        )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.train_words is not None:
            checkpoint["tagging"] = {"train_words": sorted(self.train_words)}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        if "tagging" in checkpoint:
            self.train_words = set(checkpoint["tagging"]["train_words"])

    @classmethod
    def from_checkpoint_dict(cls, ckpt: dict, **extra) -> "TaggingTask":
        """Rebuild from a checkpoint dict, with the training word forms it records."""
        return super().from_checkpoint_dict(ckpt, train_words=(ckpt.get("tagging") or {}).get("train_words"), **extra)

    # ----------------------------------------------------------------- training
    def forward(self, src: torch.Tensor, word_ids: torch.Tensor, spell: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(src, word_ids, spell)  # (B, W, C)

    def _inputs(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, spell)``: the pieces to embed and the pieces to spell words from, both
        ``(B, T)``, with word and piece dropout applied in training."""
        src = spell = batch["src"]
        unk = self.tokenizer.unk_id if self.tokenizer is not None else 3
        if self.training and self.hparams.word_dropout > 0:
            src = spell = drop_words(src, batch["word_ids"], self.hparams.word_dropout, unk)
        if self.training and self.hparams.piece_dropout > 0:
            src = drop_words(src, batch["word_ids"], self.hparams.piece_dropout, unk)
        return src, spell

    def _step(self, batch: dict, inputs: tuple[torch.Tensor, torch.Tensor] | None = None,
              input_hook=None) -> tuple[torch.Tensor, torch.Tensor, int, dict]:
        """``(loss, correct, n_words, aux)`` of the main tags; ``aux`` is ``{}`` without an
        auxiliary tag set, else ``{"loss", "correct", "n_words"}`` of its tags. ``inputs``:
        ``_inputs(batch)`` when already drawn; ``input_hook``: see ``Tagger.word_vectors``."""
        src, spell = self._inputs(batch) if inputs is None else inputs
        if self.aux_tags and "aux_tags" not in batch:
            raise ValueError("this tagger has an auxiliary tag set but the batch has no 'aux_tags' "
                             "(set data.aux_tagset to the one it was trained with)")
        logits, aux_logits = self.model.forward_all(src, batch["word_ids"], spell, input_hook)  # (B, W, C), (B, W, C')
        loss, correct, n_words = self._score(logits, batch["tags"])
        aux: dict = {}
        if aux_logits is not None:
            aux_loss, aux_correct, aux_words = self._score(aux_logits, batch["aux_tags"])
            aux = {"loss": aux_loss, "correct": aux_correct, "n_words": aux_words}
        return loss, correct, n_words, aux

    def _objective(self, batch: dict, inputs, input_hook=None) -> tuple[torch.Tensor, int, dict]:
        """The training loss (main + ``aux_weight`` x auxiliary), and ``_step``'s count and aux."""
        loss, _, n_words, aux = self._step(batch, inputs, input_hook)
        if aux:
            loss = loss + self.hparams.aux_weight * aux["loss"]
        return loss, n_words, aux

    def _score(self, logits: torch.Tensor, tags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Loss, number of correct argmax tags, and word count of one classifier's logits; a
        word whose gold tag is outside the training tag set counts as a word, never correct."""
        logits, tags = align_word_dims(logits, tags)
        loss, _ = tagging_loss(logits, tags, self.hparams.label_smoothing)
        real = tags.ne(IGNORE_INDEX)  # (B, W)
        correct = (logits.argmax(-1).eq(tags) & real).sum()
        return loss, correct, int(real.sum())

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        inputs = self._inputs(batch)
        eps = self.hparams.adversarial_eps
        seen = InputCapture() if eps > 0 else None
        loss, n_words, aux = self._objective(batch, inputs, seen)
        n = max(n_words, 1)
        if aux:
            self.log("train/aux_loss", aux["loss"], batch_size=max(aux["n_words"], 1))
        if seen is not None:
            r = adversarial_shift(loss, seen.x, eps)  # (B, L, D)
            adv, _, _ = self._objective(batch, inputs, lambda v: v + r)
            self.log("train/adv_loss", adv, batch_size=n)
            loss = loss + adv
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss, correct, n_words, aux = self._step(batch)
        n = max(n_words, 1)
        if aux:
            n_aux = max(aux["n_words"], 1)
            self.log("val/aux_acc", aux["correct"].float() / n_aux, batch_size=n_aux, sync_dist=True)
        # Lightning averages epoch values weighted by batch_size: weighting by words makes
        # val/acc the exact corpus token accuracy and val/loss the per-word mean.
        self.log("val/loss", loss, prog_bar=True, batch_size=n, sync_dist=True)
        self.log("val/acc", correct.float() / n, prog_bar=True, batch_size=n, sync_dist=True)

    def configure_optimizers(self):
        return optimizer_with_warmup(self, self.hparams, self._trainer)

    # ----------------------------------------------------------------- inference
    def encoder_max_len(self) -> int:
        """The most pieces the encoder takes at once (longer sentences are tagged in chunks)."""
        return model_max_len(self.model, int(self.hparams.model.get("max_len", 512)))

    def tagger(self, max_tokens: int = 4096, device: str | torch.device | None = None) -> WordTagger:
        """A :class:`~transformer.inference.tagger.WordTagger` for pre-tokenized words with this
        model (or ensemble) and its tokenizer; ``device``: ``None`` keeps the model's."""
        if isinstance(self.model, TaggerEnsemble):
            members = self.model.members()
        else:
            members = [(self.model, self.tokenizer, self.encoder_max_len())]
        data = self.hparams.data
        aux_field = tag_field(data, data["aux_tagset"]) if self.aux_tags else None
        return WordTagger(members, self.tags, self.tagset, self.aux_tags, aux_field, max_tokens, device)

    def evaluate(self, split: str, decode_cfg: dict | None = None, output_dir: Path | str = "eval",
                 data_dir: str = "data/cache", mirror_root: str | None = None,
                 device: str | torch.device = "cpu") -> dict:
        """Tag a split of the checkpoint's dataset (or a file of its format given as ``split``,
        e.g. ``transformer-evaluate ckpt_path=best.ckpt split=other.conllu``), score it and write the report files
        (:func:`~transformer.evaluation.tagging.evaluate_tagging`; ``decode_cfg`` is ignored:
        tagging has no search)."""
        return evaluate_tagging(self.tagger(device=device), self.hparams.data, self.train_words, split,
                                output_dir, data_dir, mirror_root)


__all__ = ["TaggingTask", "align_word_dims", "drop_words", "tagging_loss"]
