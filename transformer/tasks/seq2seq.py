"""What every translation task shares, whatever its objective: the vocabulary and special ids,
the tokenizers and the corpus in the checkpoint, the optimizer and its schedule, validation BLEU,
and translating raw text. The autoregressive (``tasks.translation``), Mask-Predict
(``tasks.nat``) and CTC (``tasks.ctc``) tasks are its subclasses, siblings that each add their
own settings, loss and search.

Shape legend: B sentences, S source tokens, T target tokens.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any, Mapping

import lightning as L
import torch
from torchmetrics.text import WordErrorRate

from transformer import kinds
from transformer.data.core.tokenizer import SubwordTokenizer, tokenizer_from_str
from transformer.data.parallel.languages import Languages, direction_name
from transformer.decoding.settings import DecodeSettings
from transformer.decoding.strategies import SearchIds
from transformer.evaluation import CorpusBLEU
from transformer.evaluation.translation import bleu_tokenizer, evaluate_files, evaluate_split
from transformer.inference import SearchFn, Translator
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import TASK_KEY, current_hyper_parameters, record_model_settings
from transformer.tasks.build import build_optimizer, optimizer_node
from transformer.tasks.build import RunLength, inverse_sqrt_schedule, warmup_linear_factor
from transformer.ranges import Probability, Range


class Seq2SeqTask(L.LightningModule):
    """A translation LightningModule without its objective: subclasses give ``training_step``,
    ``validation_step`` (calling :meth:`_add_bleu_stats` when :meth:`_bleu_due`) and
    :meth:`search_fn`, and take their own settings as keyword arguments before ``**shared``.

    Args:
        model: the resolved model config (``tasks.build``); vocab_size, tgt_vocab_size (None:
            one joint vocabulary), pad_id, bos_id, eos_id: what the data's tokenizers give.
        src_lang, tgt_lang: the language pair (validation BLEU tokenizes by the target); with
            ``data``'s directions and tag side, what :attr:`languages` holds.
        label_smoothing: ε of the token loss.
        lr: the peak learning rate, reached after ``warmup_steps`` updates, then decayed as
            the inverse square root (Vaswani et al. 2017).
        schedule: ``"inverse_sqrt"`` (after the warm-up) or ``"linear"`` (to 0 at the trainer's
            last step: a run bounded by a few epochs ends at a low rate, not inverse-sqrt's tail).
        optimizer: a ``_partial_`` node of ``tasks.build.OPTIMIZERS``; None: Adam,
            betas (0.9, 0.98), eps 1e-9 (:data:`default_optimizer`).
        val_bleu, val_bleu_every: greedy BLEU on validation, every N epochs (NaN in between); a
            multilingual model's also per direction, ``val/bleu/<src>-<tgt>`` (``val/bleu`` is
            the whole split's, the one checkpoints and early stopping follow).
        val_decode: the decoding settings of validation BLEU (``DecodeSettings``); a transcript
            model (speech in) logs the word error rate of the same transcripts as ``val/wer``.
        data: the corpus (files, columns, splits), so evaluation can read a split by name.
        tokenizers: ``{"src": json, "tgt": json}``, kept as a checkpoint entry of its own.
    """

    task_name: str
    model_kind: str  # how its model is searched (decoding.strategies: AUTOREGRESSIVE, NAT, CTC)
    languages: Languages  # its pair, directions and tag side, read once from its settings
    default_optimizer = optimizer_node("Adam", betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)

    def __init__(
        self,
        model: dict,
        vocab_size: Annotated[int, Range(1, 2**24)],
        pad_id: Annotated[int, Range(0, 2**24)],
        bos_id: int,
        eos_id: int,
        src_lang: str,
        tgt_lang: str,
        tgt_vocab_size: Annotated[int | None, Range(1, 2**24)] = None,
        label_smoothing: Annotated[float, Probability()] = 0.1,
        lr: Annotated[float, Range(0, 10)] = 5e-4,
        optimizer: dict | None = None,
        warmup_steps: Annotated[int, Range(0, 2**40)] = 4000,
        schedule: str = "inverse_sqrt",
        val_bleu: bool = True,
        val_bleu_every: Annotated[int, Range(1, 2**40)] = 1,
        val_decode: dict | None = None,
        data: dict | None = None,
        tokenizers: dict | None = None,
    ) -> None:
        super().__init__()
        if schedule not in ("linear", "inverse_sqrt"):
            raise ValueError(f"task.schedule must be 'linear' or 'inverse_sqrt', got {schedule!r}")
        if val_bleu_every < 1:
            raise ValueError(f"task.val_bleu_every must be >= 1, got {val_bleu_every}")
        DecodeSettings.check(val_decode or {}, "task.val_decode")
        # Lightning records the settings of every __init__ in the call chain: this one's and the
        # subclass's own. Tokenizers go into the checkpoint as an entry of their own.
        self.save_hyperparameters(ignore=["tokenizers"])
        self.languages = Languages.of_checkpoint(self.hparams)
        self.model = self._build_model()
        # longest sequence the model takes (positions); an ensemble takes its members' minimum
        self.max_len: int | None = self.hparams.model.get("max_len")
        self.src_tokenizer: SubwordTokenizer | None = None
        self.tgt_tokenizer: SubwordTokenizer | None = None
        if tokenizers is not None:
            self.set_tokenizers(tokenizers)
        # A multilingual model's validation BLEU of each direction too (``val/bleu/<src>-<tgt>``).
        self._directions = [direction_name(d) for d in self.languages.directions or ()]
        self._bleu: list[CorpusBLEU] | None = None  # made by the validation that scores (_validation_bleu)
        # A transcript model (speech in: ``transformer.kinds``) also logs ``val/wer``, the word
        # error rate its checkpoints are chosen on (experiment=fsdd_strings: ``monitor: val/wer``).
        self._wer = WordErrorRate() if kinds.input_kind(data).frontend is not None else None

    # ----------------------------------------------------------------- construction
    def _build_model(self) -> torch.nn.Module:
        hp = self.hparams
        return build_model(hp.model, vocab_size=hp.vocab_size, tgt_vocab_size=hp.tgt_vocab_size, pad_id=hp.pad_id)

    def set_tokenizers(self, tokenizers: dict) -> None:
        """Attach tokenizers given as ``{"src": json, "tgt": json}`` strings (a ``tokenizer.json``,
        or a SentencePiece tokenizer's JSON: ``data.core.sentencepiece_tokenizer``); an input kind
        with a front end (audio frames) has no ``src`` one."""
        self.src_tokenizer = tokenizer_from_str(tokenizers["src"]) if tokenizers.get("src") else None
        self.tgt_tokenizer = tokenizer_from_str(tokenizers["tgt"])

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``TranslationDataModule``: vocabulary, special ids,
        languages, tokenizers and the corpus it reads. A data module of an input kind with a front
        end (``transformer.kinds``: audio frames and their transcripts) has a target tokenizer
        only; the source vocabulary (``vocab_size``) is then 1, unused."""
        src_tok, tgt_tok = dm.src_tokenizer, dm.tgt_tokenizer
        if kinds.input_kind(dm.corpus).frontend is not None:
            return dict(vocab_size=1, tgt_vocab_size=tgt_tok.vocab_size, pad_id=tgt_tok.pad_id, bos_id=tgt_tok.bos_id,
                        eos_id=tgt_tok.eos_id, src_lang=dm.src_lang, tgt_lang=dm.tgt_lang,
                        tokenizers={"tgt": tgt_tok.to_str()}, data=dm.corpus)
        joint = src_tok is tgt_tok or src_tok.to_str() == tgt_tok.to_str()
        return dict(
            vocab_size=src_tok.vocab_size,
            tgt_vocab_size=None if joint else tgt_tok.vocab_size,
            pad_id=tgt_tok.pad_id,
            bos_id=tgt_tok.bos_id if getattr(dm, "start_id", None) is None else dm.start_id,
            eos_id=tgt_tok.eos_id,
            src_lang=dm.src_lang,
            tgt_lang=dm.tgt_lang,
            tokenizers={"src": src_tok.to_str(), "tgt": tgt_tok.to_str()},
            data=dm.corpus,
        )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[TASK_KEY] = self.task_name
        record_model_settings(checkpoint)
        if self.tgt_tokenizer is not None:  # no source tokenizer for frames (``transformer.kinds``)
            sides = {"src": self.src_tokenizer, "tgt": self.tgt_tokenizer}
            checkpoint["tokenizers"] = {side: tok.to_str() for side, tok in sides.items() if tok is not None}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "tokenizers" in checkpoint:
            self.set_tokenizers(checkpoint["tokenizers"])

    @classmethod
    def from_checkpoint_dict(cls, ckpt: dict) -> "Seq2SeqTask":
        """Rebuild from a checkpoint dict (see ``transformer.tasks.checkpoint``), in the settings'
        current form whatever form the file keeps them in."""
        task = cls(**current_hyper_parameters(cls, ckpt["hyper_parameters"]), tokenizers=ckpt.get("tokenizers"))
        task.load_state_dict(ckpt["state_dict"])
        return task

    # ----------------------------------------------------------------- training
    def configure_optimizers(self):
        hp = self.hparams
        clip = self._trainer.gradient_clip_val if self._trainer is not None else None
        optimizer = build_optimizer(self.parameters(), hp.optimizer or self.default_optimizer, hp.lr,
                                    fused=fused_adam(self.device, clip) or None)
        if hp.get("schedule", "inverse_sqrt") == "linear":
            total = RunLength(self._trainer, hp.warmup_steps)
            scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: warmup_linear_factor(step, hp.warmup_steps, total(step)))
        else:
            scheduler = inverse_sqrt_schedule(optimizer, hp.warmup_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _add_bleu_stats(self, batch: dict) -> None:
        """Decode the batch with ``val_decode`` and add its BLEU statistics."""
        # Eager always: a compiled step reads the weights once, and training changes them.
        val_decode = DecodeSettings.of(self.hparams.val_decode, "task.val_decode").replace(compile=False)
        # a target tag read by the decoder (data.tag_side=decoder) starts each row as in training
        start = {"start": batch["start"]} if "start" in batch else {}
        hyps = [h[0][0] for h in self.search_fn(val_decode)(batch["src"], **start, **frames_of_batch(batch))]
        refs = [self._strip(r) for r in batch["tgt_out"].tolist()]
        decode = self.tgt_tokenizer.decode
        hyps, refs = [decode(h) for h in hyps], [decode(r) for r in refs]
        whole, *directions = self._validation_bleu()
        whole.update(hyps, refs)
        if self._wer is not None:
            self._wer.update(hyps, refs)
        if directions and "direction" in batch:  # the joined validation of several directions
            which = batch["direction"].tolist()
            for i, bleu in enumerate(directions):
                bleu.update([h for h, w in zip(hyps, which) if w == i], [r for r, w in zip(refs, which) if w == i])

    def _validation_bleu(self) -> list[CorpusBLEU]:
        """This validation's corpus BLEU: the whole split's, then one per direction, each
        tokenized like evaluation by its target language (or as the corpus says). Made when a
        validation first scores, and dropped once scored: training alone builds no metric."""
        if self._bleu is None:
            tokenize = (self.hparams.data or {}).get("bleu_tokenize")
            targets = [self.hparams.tgt_lang, *(tgt for _, tgt in self.languages.directions or ())]
            self._bleu = [CorpusBLEU(bleu_tokenizer(tgt, tokenize)) for tgt in targets]
        return self._bleu

    def _strip(self, ids: list[int]) -> list[int]:
        hp = self.hparams
        return [i for i in ids if i not in (hp.pad_id, hp.eos_id, hp.bos_id)]

    def _bleu_due(self) -> bool:
        """Greedy BLEU this validation: asked for, tokenizers known, and an epoch it is due
        (every ``val_bleu_every``-th; the sanity check before training counts as due)."""
        hp = self.hparams
        if not (hp.val_bleu and self.tgt_tokenizer is not None):
            return False
        trainer = self._trainer
        if trainer is None or trainer.sanity_checking:
            return True
        return (self.current_epoch + 1) % hp.val_bleu_every == 0

    def on_validation_epoch_end(self) -> None:
        if not (self.hparams.val_bleu and self.tgt_tokenizer is not None):
            return
        if not self._bleu_due():
            # Not measured this epoch: NaN, which checkpointing ranks last and early stopping skips.
            self.log("val/bleu", float("nan"), prog_bar=True, sync_dist=False)
            if self._wer is not None:
                self.log("val/wer", float("nan"), prog_bar=True, sync_dist=False)
            for name in self._directions:
                self.log(f"val/bleu/{name}", float("nan"), sync_dist=False)
            return
        # Corpus BLEU: sum the sufficient statistics over ranks, then score once; a row for the
        # whole validation split, then one per direction.
        rows = [bleu.stats for bleu in self._validation_bleu()]
        stats = self.all_gather(torch.tensor(rows, dtype=torch.long, device=self.device))  # (1 + n_dir, N_STATS)
        if stats.dim() > 2:  # (world, 1 + n_dir, N_STATS)
            stats = stats.sum(0)
        stats = stats.tolist()
        self.log("val/bleu", CorpusBLEU.score(stats[0]), prog_bar=True, sync_dist=False)
        for name, row in zip(self._directions, stats[1:]):
            # NaN for a direction no validation sentence came from (trainer.limit_val_batches)
            self.log(f"val/bleu/{name}", CorpusBLEU.score(row) if row[0] or row[1] else float("nan"), sync_dist=False)
        if self._wer is not None:  # errors and reference words summed over ranks, then divided
            self.log("val/wer", float(self._wer.compute()), prog_bar=True, sync_dist=False)
            self._wer.reset()
        self._bleu = None

    # ----------------------------------------------------------------- inference
    def search_fn(self, decode: DecodeSettings | Mapping[str, Any] | None, stats: dict | None = None) -> SearchFn:
        """The search ``decode`` names (``decoding.strategies``, one of :attr:`model_kind`'s), bound
        to this model; a search with statistics of its own keeps them up to date in ``stats``."""
        raise NotImplementedError

    def search_ids(self) -> SearchIds:
        """What every search takes from this task: the special ids and the model's longest output."""
        hp = self.hparams
        return SearchIds(bos_id=hp.bos_id, eos_id=hp.eos_id, pad_id=hp.pad_id, max_len=self.max_len)

    def translator(self, decode: DecodeSettings | Mapping[str, Any] | None,
                   device: str | torch.device = "cpu") -> Translator:
        """A :class:`Translator` for raw sentences with this model and its tokenizers, whose
        ``extra_stats()`` are the search's statistics."""
        stats: dict[str, float] = {}
        settings = DecodeSettings.of(decode)
        if kinds.input_kind(self.hparams).frontend is not None:  # audio files in, transcripts out
            from transformer.inference.transcriber import Transcriber

            transcriber = Transcriber(self.search_fn(settings, stats), self.tgt_tokenizer, self.hparams.data,
                                      max_frames=max(settings.max_tokens, 20_000), device=device)
            transcriber.stats = stats
            return transcriber
        langs = self.languages
        coded = functools.partial(langs.coded_framing, self.src_tokenizer) if langs.coded else None
        translator = Translator(self.search_fn(settings, stats), self.src_tokenizer, self.tgt_tokenizer,
                                max_tokens=settings.max_tokens, max_src_len=self.max_len,
                                device=device, tag_to_decoder=langs.tag_to_decoder, coded=coded,
                                start_prefix=[self.hparams.bos_id] if coded is not None else ())
        translator.stats = stats
        codes = langs.codes or {}
        if coded is not None and langs.src_lang in codes and langs.tgt_lang in codes:
            # a pretrained family's model scored (or fine-tuned) in one direction: framed for it
            translator.set_target_language(self.hparams["tgt_lang"], self.hparams["src_lang"])
        return translator

    def evaluate(self, split: str, decode_cfg: DecodeSettings | Mapping[str, Any], output_dir: Path,
                 data_dir: str = "data/cache", mirror_root: str | None = None, device: str = "cpu",
                 bleu_tokenize: str | None = None, direction: tuple[str, str] | None = None) -> dict:
        """Translate a split of the training corpus (of a multilingual model, in one ``direction``),
        score with sacreBLEU, write hypotheses and metrics (``evaluation.translation.evaluate_split``)."""
        if kinds.input_kind(self.hparams).frontend is not None:  # a manifest of recordings and transcripts
            from transformer.evaluation.speech import evaluate_transcripts

            return evaluate_transcripts(self, split, decode_cfg, output_dir, device)
        extra = {key: value for key, value in (("bleu_tokenize", bleu_tokenize), ("direction", direction)) if value}
        return evaluate_split(self, split, decode_cfg, output_dir, data_dir, mirror_root, device, **extra)

    def evaluate_files(self, src: str, ref: str, decode_cfg: DecodeSettings | Mapping[str, Any], output_dir: Path,
                       device: str = "cpu", bleu_tokenize: str | None = None) -> dict:
        """Translate the file ``src`` and score it against ``ref`` (line-aligned), as :meth:`evaluate`
        scores a split (``evaluation.translation.evaluate_files``)."""
        extra = {"bleu_tokenize": bleu_tokenize} if bleu_tokenize else {}
        return evaluate_files(self, src, ref, decode_cfg, output_dir, device, **extra)


def frames_of_batch(batch: Mapping[str, Any]) -> dict:
    """What a batch of frames adds to its source for the model: ``{"src_lengths": (B,)}`` (an input
    kind with a front end, ``transformer.kinds``); nothing for token ids, whose padding says it."""
    return {"src_lengths": batch["src_lengths"]} if "src_lengths" in batch else {}


def fused_adam(device: torch.device, gradient_clip_val: float | None) -> bool:
    """Whether Adam runs as the fused CUDA kernel: on CUDA, and only without gradient clipping.

    A fused optimizer unscales the gradients inside its own step, so Lightning's mixed-precision
    plugin refuses to clip them first (``RuntimeError: ... does not allow for gradient
    clipping``); the GPU recipes clip at 1.0 and take the default (multi-tensor) Adam.
    """
    return device.type == "cuda" and not gradient_clip_val


__all__ = ["Seq2SeqTask", "frames_of_batch", "fused_adam"]
