"""Masked-LM pretraining (BERT, Devlin et al. 2019): a ``MaskedLanguageModel`` learns to
restore hidden pieces of unlabelled text; its encoder then starts a tagger, a classifier or a
translation encoder (``init_from``, :mod:`transformer.tasks.transfer`).

Shape legend: B batch, T pieces, N chosen positions, V vocabulary.

The masking (:func:`bert_mask`) follows BERT: 15 % of the pieces are chosen, of those 80 % are
replaced by ``<mask>``, 10 % by a random piece and 10 % left as they are; the loss is the
cross-entropy of the chosen pieces only. Special tokens (pad, BOS, EOS, unk, mask: the first
ids) are never chosen. With ``whole_word`` a word is chosen or not as a whole (Cui et al. 2019):
its pieces are all chosen together, each then masked, replaced or kept on its own draw; words
are the tokenizer's (:meth:`~transformer.data.core.tokenizer.SubwordTokenizer.word_starts`).

The draw is new every epoch and the same on every run: each batch's generator is seeded from
the task's ``seed``, the epoch and the batch's ``key`` (its smallest row index, which names
it within an epoch; see :mod:`transformer.data.text.datamodule`), so a resumed run draws
exactly what the uninterrupted one did, however the batches are spread over devices.
Validation always draws with epoch ``-1``: its numbers compare across epochs.

ELECTRA (Clark et al. 2020), when the model is an ``ElectraModel``: the generator is trained
as the masked LM above; each chosen piece is then replaced by a piece sampled from the
generator's prediction (never a special token; drawn from the same seeded generator as the
mask), and the discriminator scores every real piece of the corrupted text as original or
replaced (a sample equal to the original counts as original). The loss is the generator's
cross-entropy plus ``rtd_weight`` times the discriminator's mean binary cross-entropy (the
paper's 50); no gradient passes through the sampling. The discriminator learns from every
piece, not only the 15 % chosen, which is where its sample efficiency comes from.

Logged: ``train/loss``, ``lr``, ``val/loss`` (the loss trained: per chosen piece for the masked
LM; with ELECTRA the sum above), ``val/acc`` (share of chosen pieces the masked LM, or
ELECTRA's generator, predicts right) and ``val/ppl`` (``exp`` of its loss per chosen piece);
with ELECTRA also ``val/rtd_loss`` (mean per real piece) and ``val/rtd_acc``. The checkpoint carries the model
config, the data settings and the tokenizer (``checkpoint["tokenizers"]["src"]``);
:meth:`MaskedLMTask.filler` fills ``[MASK]`` in raw text (``inference.fill``), and
:meth:`MaskedLMTask.evaluate` scores a split or a text file as validation does.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Iterable

import lightning as L
import torch
import torch.nn.functional as F

from transformer import kinds
from transformer.data.core.batching import pad_ids, token_budget_batches
from transformer.data.core.tokenizer import MASK, SPECIAL_TOKENS, SubwordTokenizer
from transformer.data.text.corpus import TextCorpus, make_sources
from transformer.data.text.datamodule import chunk_spans
from transformer.files import inside, write_text
from transformer.inference.fill import MaskFiller
from transformer.inference.tagger import model_max_len
from transformer.models.mlm import ElectraModel
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import OneTokenizerCheckpoint
from transformer.tasks.build import ADAMW, optimizer_with_warmup
from transformer.ranges import Range

IGNORE_INDEX = -100
#: Ids below this are special tokens, never chosen (the tokenizer gives them the first ids).
N_SPECIAL = len(SPECIAL_TOKENS)
#: The epoch validation draws its masks with.
VALIDATION_EPOCH = -1


def masking_seed(seed: int, epoch: int, key: int) -> int:
    """A 63-bit generator seed for one batch of one epoch (blake2b: the same on every machine)."""
    h = hashlib.blake2b(f"{seed}:{epoch}:{key}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


def word_ids_of(src: torch.Tensor, word_start: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` index of each piece's word within its row, counting from 0: a new word at
    each piece that begins one (``word_start (V,)`` bool, looked up by id) and at position 0."""
    starts = word_start[src]  # (B, T)
    starts[:, 0] = True
    return starts.long().cumsum(1) - 1


def bert_mask(src: torch.Tensor, generator: torch.Generator, mask_id: int, vocab_size: int,
              rate: float = 0.15, mask_share: float = 0.8, random_share: float = 0.1,
              word_start: torch.Tensor | None = None, n_special: int = N_SPECIAL,
              ordinary_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ``src (B, T)`` (see the module docstring).

    Returns ``(inputs, targets)``, both ``(B, T)``: the pieces the model reads, and the
    original piece at each chosen position (``IGNORE_INDEX`` elsewhere). ``word_start``: a
    ``(V,)`` bool table of the pieces that begin a word, for whole-word masking. Random
    replacements are ordinary pieces (ids ``n_special .. vocab_size - 1``; ``ordinary_ids (K,)``:
    these pieces instead, where a pretrained family's specials lie elsewhere, BERT's ``[CLS]`` at 101).
    """
    device = src.device
    if ordinary_ids is None:
        eligible = src.ge(n_special)  # (B, T): padding and special tokens are never chosen
    else:
        eligible = torch.isin(src, ordinary_ids)  # (B, T)
    if word_start is None:
        draw = torch.rand(src.shape, generator=generator, device=device)  # (B, T)
    else:
        per_word = torch.rand(src.shape, generator=generator, device=device)  # (B, W <= T)
        draw = per_word.gather(1, word_ids_of(src, word_start.to(device)))  # (B, T): a word's draw on each piece
    chosen = eligible & draw.lt(rate)
    how = torch.rand(src.shape, generator=generator, device=device)  # (B, T)
    if ordinary_ids is None:
        random_ids = torch.randint(n_special, vocab_size, src.shape, generator=generator, device=device)
    else:
        pick = torch.randint(0, ordinary_ids.numel(), src.shape, generator=generator, device=device)  # (B, T)
        random_ids = ordinary_ids[pick]
    inputs = torch.where(chosen & how.lt(mask_share), torch.full_like(src, mask_id), src)
    inputs = torch.where(chosen & how.ge(mask_share) & how.lt(mask_share + random_share), random_ids, inputs)
    return inputs, src.masked_fill(~chosen, IGNORE_INDEX)


@torch.no_grad()
def electra_corrupt(src: torch.Tensor, chosen: torch.Tensor, logits: torch.Tensor,
                    generator: torch.Generator, n_special: int = N_SPECIAL,
                    special_ids: torch.Tensor | None = None) -> torch.Tensor:
    """ELECTRA's corrupted text: ``src (B, T)`` with each ``chosen (B, T)`` piece replaced by a
    piece sampled from the generator's ``logits (N, V)`` for the chosen positions in row order
    (never a special token: ids below ``n_special``, or ``special_ids`` where given); every other
    piece as it was."""
    proposals = logits.detach().float().clone()
    if special_ids is None:
        proposals[:, :n_special] = float("-inf")
    else:
        proposals[:, special_ids] = float("-inf")
    sampled = torch.multinomial(proposals.softmax(-1), 1, generator=generator).squeeze(1)  # (N,)
    return src.masked_scatter(chosen, sampled)


class MaskedLMTask(OneTokenizerCheckpoint, L.LightningModule):
    """Masked-LM cross-entropy over a ``MaskedLanguageModel``, or ELECTRA's loss over an
    ``ElectraModel``; AdamW with warm-up.

    Args:
        model: resolved model config (``_target_`` a ``MaskedLanguageModel`` or an
            ``ElectraModel``); ``vocab_size`` (= ``piece_vocab_size``) and ``pad_id`` are
            injected here.
        piece_vocab_size: the tokenizer's real size.
        data: the data module's ``settings()`` (the sources and how validation was made).
        mask_rate: share of pieces chosen; mask_share, random_share: of the chosen pieces, the
            shares replaced by ``<mask>`` and by a random piece (the rest are kept).
        whole_word: choose whole words (all pieces of a word together).
        seed: seeds every batch's masking (with the epoch and the batch's key).
        rtd_weight: ELECTRA's weight of the discriminator's loss (unused by a masked LM).
        lr: peak learning rate; optimizer: a ``_partial_`` node of ``tasks.build.OPTIMIZERS``
            (None: AdamW, betas (0.9, 0.98), eps 1e-8, weight decay 0.01, :data:`default_optimizer`);
            warmup_steps, schedule: ``"linear"`` (decay to 0
            at the last step) or ``"inverse_sqrt"``.
        warmup: the warm-up as a fraction of the run's updates (``0.06``: the first 6 %, from
            the trainer's estimate of the run's length); set, it replaces ``warmup_steps``.
        tokenizer: the tokenizer JSON; kept out of hparams.
    """

    kind = kinds.MLM

    task_name = kind.name
    default_optimizer = ADAMW

    def __init__(
        self,
        model: dict,
        piece_vocab_size: Annotated[int, Range(1, 2**24)],
        pad_id: Annotated[int, Range(0, 2**24)],
        data: dict,
        mask_rate: float = 0.15,
        mask_share: float = 0.8,
        random_share: float = 0.1,
        whole_word: bool = False,
        seed: int = 0,
        rtd_weight: float = 50.0,
        lr: Annotated[float, Range(0, 10)] = 5e-4,
        optimizer: dict | None = None,
        warmup_steps: Annotated[int, Range(0, 2**40)] = 1000,
        warmup: Annotated[float | None, Range(0, 1)] = None,
        schedule: str = "linear",
        tokenizer: str | None = None,
    ) -> None:
        super().__init__()
        if schedule not in ("linear", "inverse_sqrt"):
            raise ValueError(f"schedule must be 'linear' or 'inverse_sqrt', got {schedule!r}")
        for key, value in (("mask_rate", mask_rate), ("mask_share", mask_share), ("random_share", random_share)):
            if not 0 <= value <= 1:
                raise ValueError(f"task.{key}={value!r}: expected a share between 0 and 1")
        if mask_share + random_share > 1:
            raise ValueError(f"task.mask_share={mask_share} + task.random_share={random_share}: more than all of "
                             f"the chosen pieces")
        self.save_hyperparameters(ignore=["tokenizer"])
        if rtd_weight < 0:
            raise ValueError(f"task.rtd_weight={rtd_weight!r}: expected a weight of 0 or more")
        self.model = build_model(model, vocab_size=piece_vocab_size, pad_id=pad_id)
        self.electra = isinstance(self.model, ElectraModel)
        self.tokenizer: SubwordTokenizer | None = SubwordTokenizer.from_str(tokenizer) if tokenizer else None
        starts = self.tokenizer.word_starts() if self.tokenizer is not None else [True] * piece_vocab_size
        # Which pieces begin a word, for whole-word masking; derived from the tokenizer, not saved.
        self.register_buffer("word_start", torch.tensor(starts, dtype=torch.bool), persistent=False)
        # A pretrained family's special tokens lie anywhere in its vocabulary (BERT's [CLS] is 101):
        # masking reads them from its tokenizer; ours are ids 0..4, the defaults of bert_mask.
        family = self.tokenizer is not None and not self.tokenizer.trained_here
        specials = sorted(self.tokenizer.special_ids) if family else []
        ordinary = [i for i in range(piece_vocab_size) if i not in set(specials)] if family else []
        self.register_buffer("special_ids", torch.tensor(specials, dtype=torch.long), persistent=False)
        self.register_buffer("ordinary_ids", torch.tensor(ordinary, dtype=torch.long), persistent=False)
        self.mask_id = self.tokenizer.mask_id if family else SPECIAL_TOKENS.index(MASK)
        self._val_sums: torch.Tensor | None = None

    # ----------------------------------------------------------------- construction
    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``TextDataModule``."""
        tok = dm.tokenizer
        return dict(piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, data=dm.settings(), tokenizer=tok.to_str())

    @property
    def lm(self):
        """The model that predicts hidden pieces: the masked LM itself, or ELECTRA's generator."""
        return self.model.generator if self.electra else self.model

    # ----------------------------------------------------------------- training
    def _generator(self, epoch: int, key: int, device: torch.device) -> torch.Generator:
        """The batch's random numbers: seeded from the task's seed, the epoch and the batch's key."""
        generator = torch.Generator(device=device)
        generator.manual_seed(masking_seed(self.hparams.seed, epoch, key))
        return generator

    def mask(self, src: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``bert_mask`` of ``src (B, T)`` with this task's settings."""
        hp = self.hparams
        return bert_mask(src, generator, self.mask_id, hp.piece_vocab_size, hp.mask_rate,
                         hp.mask_share, hp.random_share, self.word_start if hp.whole_word else None,
                         ordinary_ids=self.ordinary_ids if self.ordinary_ids.numel() else None)

    def _step(self, batch: dict, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, sums)``: the batch's loss to train on, and ``sums (6,)``: the masked LM's loss
        sum, right predictions and chosen pieces, then the discriminator's loss sum, right
        answers and scored pieces (zeros for a masked LM)."""
        src = batch["src"]  # (B, T)
        generator = self._generator(epoch, int(batch["key"]), src.device)
        inputs, targets = self.mask(src, generator)
        chosen = targets.ne(IGNORE_INDEX)  # (B, T)
        # Only the chosen positions go through the vocabulary projection (BERT predicts only
        # those too): (N, D) -> (N, V), a sixth of the work of projecting every position.
        logits = self.lm.predict(self.lm.encode(inputs)[chosen]).float()  # (N, V)
        gold = targets[chosen]  # (N,)
        lm_sum = F.cross_entropy(logits, gold, reduction="sum")
        n = chosen.sum()
        loss = lm_sum / n.clamp(min=1)  # a batch with nothing chosen contributes 0
        zero = lm_sum.new_zeros(())
        if not self.electra:
            return loss, torch.stack([lm_sum.detach(), logits.argmax(-1).eq(gold).sum().float(), n.float(),
                                      zero, zero, zero])
        corrupted = electra_corrupt(src, chosen, logits, generator,  # (B, T)
                                    special_ids=self.special_ids if self.special_ids.numel() else None)
        scored = src.ne(self.hparams.pad_id)  # (B, T): every real piece
        replaced = corrupted.ne(src)[scored].float()  # (S,)
        rtd_logits = self.model.discriminate(corrupted)[scored].float()  # (S,)
        rtd_sum = F.binary_cross_entropy_with_logits(rtd_logits, replaced, reduction="sum")
        n_scored = scored.sum()
        loss = loss + self.hparams.rtd_weight * rtd_sum / n_scored.clamp(min=1)
        return loss, torch.stack([lm_sum.detach(), logits.argmax(-1).eq(gold).sum().float(), n.float(),
                                  rtd_sum.detach(), rtd_logits.gt(0).float().eq(replaced).sum().float(),
                                  n_scored.float()])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, _ = self._step(batch, self.current_epoch)
        self.log("train/loss", loss, prog_bar=True, batch_size=max(int(batch["n_tokens"]), 1))
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(6, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._val_sums += self._step(batch, VALIDATION_EPOCH)[1].double()

    def _metrics(self, sums: list[float]) -> dict[str, float]:
        """``loss``, ``acc``, ``ppl`` (and with ELECTRA ``rtd_loss``, ``rtd_acc``) of summed counts."""
        lm_sum, correct, n, rtd_sum, rtd_correct, n_scored = sums
        lm_loss = lm_sum / max(n, 1.0)
        out = {"loss": lm_loss, "acc": correct / max(n, 1.0), "ppl": math.exp(min(lm_loss, 50.0))}
        if self.electra:
            out["rtd_loss"] = rtd_sum / max(n_scored, 1.0)
            out["rtd_acc"] = rtd_correct / max(n_scored, 1.0)
            out["loss"] = lm_loss + self.hparams.rtd_weight * out["rtd_loss"]
        return out

    def on_validation_epoch_end(self) -> None:
        sums = self._val_sums
        if self.trainer.world_size > 1:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
        for name, value in self._metrics(sums.tolist()).items():
            self.log(f"val/{name}", value, prog_bar=name in ("loss", "acc"))

    def configure_optimizers(self):
        return optimizer_with_warmup(self, self.hparams, self._trainer)

    # ----------------------------------------------------------------- inference
    def _passages(self, split: str, data_dir, mirror_root) -> Iterable[str]:
        data = self.hparams.data
        if split in ("train", "valid") and data.get("files"):
            corpus = TextCorpus(data["files"], data.get("valid"), data.get("valid_fraction", 0.01),
                                data.get("valid_seed", 0), data_dir, mirror_root)
            return corpus.stream(split)
        if Path(split).is_file():
            return TextCorpus(make_sources([split]), valid=make_sources([split])).stream("valid")
        raise ValueError(f"split={split!r}: not train, valid (of the checkpoint's text) nor a file of text")

    @torch.no_grad()
    def evaluate(self, split: str, decode_cfg: dict | None = None, output_dir: Path | str = "eval",
                 data_dir: str = "data/cache", mirror_root: str | None = None,
                 device: str | torch.device = "cpu", max_tokens: int = 4096) -> dict:
        """Masked-LM loss, accuracy and perplexity of a split of the checkpoint's text (``train``,
        ``valid``) or of a text file (one passage a line), masked as validation masks
        (``VALIDATION_EPOCH``; ``decode_cfg`` is unused: nothing is decoded). Writes
        ``{name}.{split}.metrics.json`` into ``output_dir`` and returns the metrics."""
        self.eval().to(device)
        max_len = int(self.hparams.data.get("max_len") or 128)
        starts = self.tokenizer.word_starts()
        rows = [ids[s:e] for ids in self.tokenizer.encode_batch(list(self._passages(split, data_dir, mirror_root)))
                for s, e in chunk_spans([starts[t] for t in ids], max_len)]
        sums = torch.zeros(6, dtype=torch.float64)
        for batch in token_budget_batches([len(r) for r in rows], max_tokens):
            src = pad_ids([rows[i] for i in batch], self.tokenizer.pad_id).to(device)  # (B, T)
            sums += self._step({"src": src, "key": min(batch)}, VALIDATION_EPOCH)[1].double().cpu()
        metrics = {"split": split, "dataset": self.hparams.data.get("name"), "rows": len(rows),
                   "predicted": int(sums[2]), **self._metrics(sums.tolist())}
        stem = f"{self.hparams.data.get('name') or 'text'}.{Path(split).stem}"
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        write_text(inside(Path(output_dir), f"{stem}.metrics.json"), json.dumps(metrics, indent=2) + "\n")
        return metrics

    def filler(self, max_tokens: int = 4096, device: str | torch.device | None = None) -> MaskFiller:
        """A :class:`~transformer.inference.fill.MaskFiller` with this model (ELECTRA's
        generator) and its tokenizer."""
        max_len = model_max_len(self.lm, int(self.hparams.model.get("max_len", 512)))
        return MaskFiller(self.lm, self.tokenizer, max_len, max_tokens, device)


__all__ = ["IGNORE_INDEX", "MaskedLMTask", "bert_mask", "electra_corrupt", "masking_seed", "word_ids_of"]
