"""Autoregressive translation: teacher-forced training of an ``EncoderDecoder`` with its loss
(label-smoothed cross-entropy, also the non-autoregressive tasks' token loss), validation BLEU,
and checkpoint-only evaluation.

Shape legend: B sentences, S source tokens, T target tokens, N real target tokens, D = d_model,
V vocabulary.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Sequence

import lightning as L
import torch
import torch.nn.functional as F

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.decoding import EnsembleModel, beam_search, greedy_search
from transformer.decoding.compiled import compiled_decoding
from transformer.evaluation import CorpusBLEU
from transformer.evaluation.translation import bleu_tokenizer, evaluate_split
from transformer.inference import SearchFn, Translator
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import TASK_KEY
from transformer.tasks.schedules import inverse_sqrt_schedule


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
                       label_smoothing: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced ``(loss, nll)`` of one translation batch, means over the real target tokens.

    ``src (B, S)``, ``tgt_in``/``tgt_out (B, T)``. Every position goes through the model and the
    vocabulary projection and padded positions are ignored by the loss, so shapes depend only on
    ``(B, S, T)``: no boolean indexing, no host sync, one compiled graph per batch shape (what a
    GPU and ``torch.compile`` want).
    """
    logits = model(src, tgt_in)  # (B, T, V)
    return label_smoothed_nll(logits, tgt_out, label_smoothing, pad_id)


def real_positions_loss(model: torch.nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                        label_smoothing: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``all_positions_loss`` with only the N real target positions projected to the vocabulary.

    On a CPU the ``D -> V`` product, its softmax and their backward are the costliest
    per-position work and padding needs none of it; a boolean index costs no device sync there.
    The shapes depend on the data, so it suits eager CPU training, not a compiled step. Same
    loss and gradients as ``all_positions_loss``.
    """
    real = tgt_out.ne(pad_id)  # (B, T)
    states = model.decoder_states(src, tgt_in)[real]  # (B, T, D) -> (N, D)
    return label_smoothed_nll(model.project(states), tgt_out[real], label_smoothing, pad_id)  # (N, V)


# The translation losses by the name ``task.loss`` gives.
TRANSLATION_LOSSES = {"all_positions": all_positions_loss, "real_positions": real_positions_loss}


# ----------------------------------------------------------------------------- the task
class TranslationTask(L.LightningModule):
    """Teacher forcing with label-smoothed cross-entropy, Adam + inverse-sqrt warm-up.

    Decoder input is BOS + target and the gold output is target + EOS, both built by the data
    module (``tgt_in`` / ``tgt_out``). Logged: ``train/loss``, ``train/nll``, ``lr``,
    ``val/loss``, ``val/bleu`` (greedy, sacreBLEU statistics summed over all ranks; every
    ``val_bleu_every`` epochs, NaN in between).

    ``compile`` runs the training and validation loss through ``torch.compile`` (``compile_mode``:
    ``default``, ``reduce-overhead`` for CUDA graphs, ``max-autotune``); the checkpoint and its
    state-dict keys are the same either way. On CUDA, Adam is the fused kernel unless the
    gradients are clipped (``fused_adam``).

    ``loss`` names the loss every training and validation step computes (:data:`TRANSLATION_LOSSES`):
    ``all_positions`` projects every target position to the vocabulary (fixed shapes, for a GPU
    or a compiled step), ``real_positions`` only the non-padded ones (eager CPU training); both
    give the same value and gradients.
    """

    task_name = "translation"

    def __init__(
        self,
        model: dict,
        vocab_size: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        src_lang: str,
        tgt_lang: str,
        tgt_vocab_size: int | None = None,
        label_smoothing: float = 0.1,
        lr: float = 5e-4,
        betas: Sequence[float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        warmup_steps: int = 4000,
        val_bleu: bool = True,
        val_bleu_every: int = 1,
        val_decode: dict | None = None,
        compile: bool = False,
        compile_mode: str = "default",
        loss: str = "all_positions",
        data: dict | None = None,
        tokenizers: dict | None = None,
    ) -> None:
        super().__init__()
        # Tokenizers are stored as their own checkpoint entry, not as hyperparameters; a subclass
        # with its own loss (NAT, CTC) takes no ``loss`` argument, so none is recorded for it.
        own_loss = "loss" in inspect.signature(type(self)).parameters
        self.save_hyperparameters(ignore=["tokenizers"] if own_loss else ["tokenizers", "loss"])
        self.model = self._build_model()
        # longest sequence the model takes (positions); an ensemble takes its members' minimum
        self.max_len: int | None = self.hparams.model.get("max_len")
        self.src_tokenizer: SubwordTokenizer | None = None
        self.tgt_tokenizer: SubwordTokenizer | None = None
        if tokenizers is not None:
            self.set_tokenizers(tokenizers)
        # Validation BLEU tokenizes like evaluation: by the target language, or as the corpus says.
        self._bleu = CorpusBLEU(bleu_tokenizer(tgt_lang, (data or {}).get("bleu_tokenize")))
        if val_bleu_every < 1:
            raise ValueError(f"task.val_bleu_every must be >= 1, got {val_bleu_every}")
        if loss not in TRANSLATION_LOSSES:
            raise ValueError(f"task.loss must be one of {sorted(TRANSLATION_LOSSES)}, got {loss!r}")
        loss_fn = TRANSLATION_LOSSES[loss]
        self.loss_fn = torch.compile(loss_fn, mode=compile_mode) if compile else loss_fn

    # ----------------------------------------------------------------- construction
    def _build_model(self) -> torch.nn.Module:
        hp = self.hparams
        return build_model(
            hp.model, vocab_size=hp.vocab_size, tgt_vocab_size=hp.tgt_vocab_size, pad_id=hp.pad_id
        )

    def set_tokenizers(self, tokenizers: dict) -> None:
        """Attach tokenizers given as ``{"src": json, "tgt": json}`` strings."""
        self.src_tokenizer = SubwordTokenizer.from_str(tokenizers["src"])
        self.tgt_tokenizer = SubwordTokenizer.from_str(tokenizers["tgt"])

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``TranslationDataModule``."""
        src_tok, tgt_tok = dm.src_tokenizer, dm.tgt_tokenizer
        joint = src_tok is tgt_tok or src_tok.to_str() == tgt_tok.to_str()
        return dict(
            vocab_size=src_tok.vocab_size,
            tgt_vocab_size=None if joint else tgt_tok.vocab_size,
            pad_id=tgt_tok.pad_id,
            bos_id=tgt_tok.bos_id,
            eos_id=tgt_tok.eos_id,
            src_lang=dm.src_lang,
            tgt_lang=dm.tgt_lang,
            tokenizers={"src": src_tok.to_str(), "tgt": tgt_tok.to_str()},
            # The corpus itself (files, columns, splits), so evaluation can read a split by name.
            data=getattr(dm, "corpus", None) or {"name": "multi30k", "src_lang": dm.src_lang, "tgt_lang": dm.tgt_lang},
        )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[TASK_KEY] = self.task_name
        if self.src_tokenizer is not None:
            checkpoint["tokenizers"] = {
                "src": self.src_tokenizer.to_str(),
                "tgt": self.tgt_tokenizer.to_str(),
            }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "tokenizers" in checkpoint:
            self.set_tokenizers(checkpoint["tokenizers"])

    @classmethod
    def from_checkpoint_dict(cls, ckpt: dict) -> "TranslationTask":
        """Rebuild from a checkpoint dict (see ``transformer.tasks.checkpoint``)."""
        task = cls(**ckpt["hyper_parameters"], tokenizers=ckpt.get("tokenizers"))
        task.load_state_dict(ckpt["state_dict"])
        return task

    @classmethod
    def ensemble(cls, tasks: Sequence["TranslationTask"]) -> "TranslationTask":
        """One task whose search averages the probabilities of ``tasks``' models
        (``decoding.ensemble.EnsembleModel``); it keeps the first task's settings.

        For decoding and evaluation only: the members must be autoregressive translation tasks
        with the same language pair, tokenizers and special ids, else a ``ValueError`` names
        the first difference.
        """
        first = tasks[0]
        if len(tasks) == 1:
            return first
        for i, task in enumerate(tasks, start=1):
            if type(task) is not TranslationTask:
                raise ValueError(f"ensemble member {i} is a {task.task_name!r} checkpoint; only "
                                 f"autoregressive translation checkpoints can be ensembled")
        for i, task in enumerate(tasks[1:], start=2):
            for key in ("src_lang", "tgt_lang", "pad_id", "bos_id", "eos_id"):
                if task.hparams[key] != first.hparams[key]:
                    raise ValueError(f"ensemble member {i} has {key}={task.hparams[key]!r}, "
                                     f"member 1 has {first.hparams[key]!r}")
            for side in ("src", "tgt"):
                if getattr(task, f"{side}_tokenizer").to_str() != getattr(first, f"{side}_tokenizer").to_str():
                    raise ValueError(f"ensemble member {i} has a different {side} tokenizer from member 1; "
                                     f"members must share their vocabulary")
        lengths = [t.max_len for t in tasks if t.max_len is not None]
        first.model = EnsembleModel([t.model for t in tasks])
        first.max_len = min(lengths) if lengths else None
        return first

    # ----------------------------------------------------------------- training
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)``."""
        return self.model(src, tgt_in)

    def _loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, int]:
        hp = self.hparams
        loss, nll = self.loss_fn(self.model, batch["src"], batch["tgt_in"], batch["tgt_out"],
                                 hp.label_smoothing, hp.pad_id)
        # The collator counts real target tokens on the host; counting here would sync.
        n_tokens = batch["n_tokens"] if "n_tokens" in batch else int(batch["tgt_out"].ne(hp.pad_id).sum())
        return loss, nll, n_tokens

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, nll, n_tokens = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=n_tokens)
        self.log("train/nll", nll, batch_size=n_tokens)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss, nll, n_tokens = self._loss(batch)
        self.log("val/loss", loss, prog_bar=True, batch_size=n_tokens, sync_dist=True)
        self.log("val/nll", nll, batch_size=n_tokens, sync_dist=True)
        if self._bleu_due():
            self._add_bleu_stats(batch)

    def _add_bleu_stats(self, batch: dict) -> None:
        """Decode the batch with ``val_decode`` and add its BLEU statistics."""
        # Eager always: a compiled step reads the weights once, and training changes them.
        val_decode = {**(self.hparams.val_decode or {}), "compile": False}
        hyps = [h[0][0] for h in self.search_fn(val_decode)(batch["src"])]
        refs = [self._strip(r) for r in batch["tgt_out"].tolist()]
        decode = self.tgt_tokenizer.decode
        self._bleu.update([decode(h) for h in hyps], [decode(r) for r in refs])

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
        return (self.current_epoch + 1) % hp.get("val_bleu_every", 1) == 0

    def on_validation_epoch_end(self) -> None:
        if not (self.hparams.val_bleu and self.tgt_tokenizer is not None):
            return
        if not self._bleu_due():
            # Not measured this epoch: NaN, which checkpointing ranks last and early stopping skips.
            self.log("val/bleu", float("nan"), prog_bar=True, sync_dist=False)
            return
        # Corpus BLEU: sum the sufficient statistics over ranks, then score once.
        stats = self.all_gather(torch.tensor(self._bleu.stats, dtype=torch.long, device=self.device))
        if stats.dim() > 1:
            stats = stats.sum(0)
        self.log("val/bleu", CorpusBLEU.score(stats.tolist()), prog_bar=True, sync_dist=False)
        self._bleu.reset()

    def configure_optimizers(self):
        hp = self.hparams
        clip = self._trainer.gradient_clip_val if self._trainer is not None else None
        optimizer = torch.optim.Adam(
            self.parameters(), lr=hp.lr, betas=tuple(hp.betas), eps=hp.eps,
            weight_decay=hp.weight_decay, fused=fused_adam(self.device, clip) or None,
        )
        scheduler = inverse_sqrt_schedule(optimizer, hp.warmup_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ----------------------------------------------------------------- inference
    def search_fn(self, decode_cfg: dict | None) -> SearchFn:
        """Bind greedy or beam search to this model with the configured settings."""
        cfg = dict(decode_cfg or {"strategy": "greedy"})
        hp = self.hparams
        ids = dict(bos_id=hp.bos_id, eos_id=hp.eos_id, pad_id=hp.pad_id)
        lengths = dict(max_len_a=cfg.get("max_len_a", 1.2), max_len_b=cfg.get("max_len_b", 10),
                       max_len=self.max_len)
        strategy = cfg.get("strategy", "greedy")
        model = self.model
        if cfg.get("compile"):
            model = compiled_decoding(self.model, next(self.model.parameters()).device)
        if strategy == "greedy":
            def greedy(src: torch.Tensor):
                out = greedy_search(model, src, **ids, **lengths, return_scores=True)
                return [[(list(toks), float(score))] for toks, score in out]
            return greedy
        if strategy == "beam":
            def beam(src: torch.Tensor):
                out = beam_search(
                    model, src, **ids, **lengths, beam_size=int(cfg.get("beam_size", 5)),
                    length_penalty=float(cfg.get("length_penalty", 1.0)),
                    n_best=int(cfg.get("n_best", 1)),
                )
                return [[(list(h.tokens), float(h.score)) for h in hyps] for hyps in out]
            return beam
        raise ValueError(
            f"decode.strategy={strategy!r} is not available for an autoregressive checkpoint; "
            "use greedy or beam"
        )

    def translator(self, decode_cfg: dict | None, device: str | torch.device = "cpu") -> "Translator":
        """A :class:`Translator` for raw sentences with this model and its tokenizers."""
        cfg = dict(decode_cfg or {})
        max_src = self.max_len
        return Translator(
            self.search_fn(cfg), self.src_tokenizer, self.tgt_tokenizer,
            max_tokens=int(cfg.get("max_tokens", 4096)), max_src_len=max_src, device=device,
        )

    def evaluate(self, split: str, decode_cfg: dict, output_dir: Path, data_dir: str = "data/cache",
                 mirror_root: str | None = None, device: str = "cpu", bleu_tokenize: str | None = None) -> dict:
        """Translate a split of the training corpus, score with sacreBLEU, write hypotheses and
        metrics (``evaluation.translation.evaluate_split``)."""
        extra = {"bleu_tokenize": bleu_tokenize} if bleu_tokenize else {}
        return evaluate_split(self, split, decode_cfg, output_dir, data_dir, mirror_root, device, **extra)


def fused_adam(device: torch.device, gradient_clip_val: float | None) -> bool:
    """Whether Adam runs as the fused CUDA kernel: on CUDA, and only without gradient clipping.

    A fused optimizer unscales the gradients inside its own step, so Lightning's mixed-precision
    plugin refuses to clip them first (``RuntimeError: ... does not allow for gradient
    clipping``); the GPU recipes clip at 1.0 and take the default (multi-tensor) Adam.
    """
    return device.type == "cuda" and not gradient_clip_val


def refuse_compile(decode_cfg: dict, kind: str) -> None:
    """``decode.compile=true`` compiles autoregressive search only: other kinds say so."""
    if decode_cfg.get("compile"):
        raise ValueError(f"decode.compile=true applies to greedy and beam search of an autoregressive "
                         f"checkpoint; this is {kind} checkpoint (set decode.compile=false)")
