"""Sentence classification: a ``SequenceClassifier`` trained with cross-entropy over one
label per sentence, validated by accuracy and macro-F1, and a checkpoint that classifies and
evaluates on its own.

Shape legend: B sentences, T pieces, C labels.

The checkpoint carries the resolved model config, the label list (as the data writes it), the
labels' names (``label_names``, what every output shows) and the data settings (the split
files, format and columns) as hyperparameters, and the tokenizer as
``checkpoint["tokenizers"]["src"]`` (the entry the other tasks use, so ``transformer-train
ckpt_path=...`` resumes with it). Classifying raw text is :meth:`ClassificationTask.classifier`
(``inference.classifier``), scoring a split ``evaluation.classification``.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Annotated, Sequence

import lightning as L
import torch
import torch.nn.functional as F

from transformer import kinds
from transformer.files import sha256_file
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.labelled.corpus import check_label_names
from transformer.evaluation.classification import classification_metrics, confusion_matrix, evaluate_classification
from transformer.files import inside, save_torch
from transformer.inference.classifier import AudioClassifier, ImageClassifier, SentenceClassifier
from transformer.inference.tagger import model_max_len
from transformer.models.classifier import ClassifierEnsemble
from transformer.tasks.adversarial import InputCapture, adversarial_shift, check_eps
from transformer.tasks.build import build_model
from transformer.tasks.mixing import Mixed, mix_frames, mix_images
from transformer.tasks.speaker_adversary import SpeakerAdversary, check_speaker_data, check_speakers, ramp
from transformer.tasks.checkpoint import CheckpointError, OneTokenizerCheckpoint, load_task, read_checkpoint
from transformer.tasks.build import ADAMW, optimizer_with_warmup
from transformer.ranges import Probability, Range

log = logging.getLogger(__name__)


def teacher_paths(teacher: str | Sequence[str] | None) -> list[str]:
    """``task.teacher`` as a list of checkpoint paths (``[]``: no teacher)."""
    if teacher is None:
        return []
    return [str(teacher)] if isinstance(teacher, (str, Path)) else [str(p) for p in teacher]


def check_teacher(teacher: str | Sequence[str] | None) -> None:
    """Before any data is read: every ``task.teacher`` path is a classification checkpoint,
    else a ``ValueError`` starting ``task.teacher:`` names it."""
    for path in teacher_paths(teacher):
        try:
            kind = read_checkpoint(path)["transformer_task"]
        except CheckpointError as exc:
            raise ValueError(f"task.teacher: {exc}") from None
        if kinds.TASK_KINDS.get(kind) is not kinds.CLASSIFICATION:
            raise ValueError(f"task.teacher: {path} is a {kind!r} checkpoint; a classifier learns from "
                             f"classification checkpoints")


def teacher_probabilities(teacher: str | Sequence[str], labels: Sequence[str], texts: Sequence[str],
                          cache_dir: Path | str, device: torch.device | str = "cpu",
                          kind: kinds.InputKind = kinds.TEXT) -> torch.Tensor:
    """``(N, C)``: the teacher's label probabilities (an ensemble's mean) of ``texts`` (for an
    input kind other than text, ``kind``, the files' paths), column ``c`` for ``labels[c]``; read
    from ``cache_dir/teachers/`` when the same checkpoints have classified the same texts (files
    of the same content) before. A teacher with other labels or another input kind is a
    ``ValueError``."""
    paths = teacher_paths(teacher)
    digest = hashlib.sha256()
    files = [sha256_file(t) for t in texts] if kind is not kinds.TEXT else []
    for part in [*(sha256_file(p) for p in paths), *labels, *texts, *files]:
        digest.update(part.encode("utf-8") + b"\0")
    cached = inside(Path(cache_dir) / "teachers", f"{digest.hexdigest()[:24]}.pt")
    if cached.is_file():
        probs = torch.load(cached, map_location="cpu", weights_only=True)
        if probs.shape == (len(texts), len(labels)):
            return probs
    try:
        task = load_task(paths if len(paths) > 1 else paths[0])
    except (CheckpointError, ValueError) as exc:  # a member unreadable, or members that disagree on labels
        raise ValueError(f"task.teacher: {exc}") from None
    if kinds.input_kind(task.hparams) is not kind:
        raise ValueError(f"task.teacher: {paths[0]} reads {kinds.input_kind(task.hparams).one_input} an input, "
                         f"the training data {kind.one_input}")
    if sorted(task.data_labels) != sorted(labels):
        raise ValueError(f"task.teacher: {paths[0]} has the labels {task.data_labels}, the training file "
                         f"{list(labels)}")
    probs = task.classifier(device=device).probabilities(list(texts))  # (N, C) in the teacher's order
    probs = probs[:, [task.data_labels.index(label) for label in labels]].contiguous()
    cached.parent.mkdir(parents=True, exist_ok=True)
    save_torch(probs, cached)
    return probs


def online_teachers(teacher: str | Sequence[str], labels: Sequence[str], data: dict,
                    device: torch.device | str = "cpu") -> list[torch.nn.Module]:
    """The teacher's models (an ensemble's members), in eval mode on ``device``, each with its
    outputs' columns in the order of ``labels``, for images of the size ``data`` declares. A
    teacher with other labels, another input kind or another image size is a ``ValueError``."""
    paths = teacher_paths(teacher)
    try:
        task = load_task(paths if len(paths) > 1 else paths[0])
    except (CheckpointError, ValueError) as exc:
        raise ValueError(f"task.teacher: {exc}") from None
    theirs = task.hparams.data
    if kinds.input_kind(theirs) is not kinds.PATCHES:
        raise ValueError(f"task.teacher: {paths[0]} reads {kinds.input_kind(theirs).one_input} an input, "
                         f"the training data {kinds.PATCHES.one_input}")
    size = [(d["height"], d["width"], d.get("channels", 1)) for d in (theirs, data)]
    if size[0] != size[1]:
        raise ValueError(f"task.teacher: {paths[0]} reads {size[0][0]}x{size[0][1]} images of {size[0][2]} "
                         f"channel(s), the training data {size[1][0]}x{size[1][1]} of {size[1][2]}")
    if sorted(task.data_labels) != sorted(labels):
        raise ValueError(f"task.teacher: {paths[0]} has the labels {task.data_labels}, the training file "
                         f"{list(labels)}")
    order = [task.data_labels.index(label) for label in labels]
    return [_Reordered(model, order).to(device).eval() for model, _, _ in task.members()]


class _Reordered(torch.nn.Module):
    """A classifier whose logits' columns are picked in ``order`` (a teacher's labels in the
    student's order): ``forward(src) -> (B, C)``."""

    def __init__(self, model: torch.nn.Module, order: Sequence[int]):
        super().__init__()
        self.model = model
        self.register_buffer("order", torch.tensor(list(order)), persistent=False)

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.model(src)[:, self.order]  # (B, C)


def distillation_loss(logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``T² · KL(target_T ‖ softmax(logits / T))``, the batch mean, where ``target (B, C)`` are
    probabilities and ``target_T`` them sharpened or softened by ``T`` (Hinton et al. 2015;
    ``T²`` keeps the gradient's scale as ``T`` grows)."""
    t = float(temperature)
    soft = torch.softmax(target.float().clamp_min(1e-12).log() / t, dim=-1)  # (B, C)
    return F.kl_div(F.log_softmax(logits.float() / t, dim=-1), soft, reduction="batchmean") * t * t


class ClassificationTask(OneTokenizerCheckpoint, L.LightningModule):
    """Cross-entropy over a ``SequenceClassifier``; AdamW with warm-up.

    Logged: ``train/loss``, ``lr``, ``val/loss``, ``val/acc`` and ``val/f1`` (macro-F1 over
    the whole validation split, from one confusion matrix per epoch).

    Args:
        model: resolved model config (``_target_`` a ``SequenceClassifier``); ``vocab_size``
            (= ``piece_vocab_size``), ``pad_id`` and ``n_classes`` are injected here.
        piece_vocab_size: the tokenizer's real size (not ``vocab_size``: the data module's
            hyperparameter of that name is the requested size).
        labels: label strings as the data writes them; id ``i`` is ``labels[i]``.
        label_names: what id ``i`` is called in every output (``[negative, positive]``); None:
            the labels themselves (and so for checkpoints made before names were kept).
        data: the data module's ``settings()``: name, split files, format, columns.
        label_smoothing: as in ``F.cross_entropy`` (Szegedy et al. 2016).
        lr: peak learning rate; warmup_steps: linear warm-up updates.
        warmup: the warm-up as a fraction of the run's updates (``0.06``: the first 6 %, from
            the trainer's estimate of the run's length); set, it replaces ``warmup_steps``.
        optimizer: a ``_partial_`` node of ``tasks.build.OPTIMIZERS``; None: AdamW,
            betas (0.9, 0.98), eps 1e-8, weight decay 0.01 (:data:`default_optimizer`).
        schedule: ``"linear"`` (decay to 0 at the trainer's last step) or ``"inverse_sqrt"``.
        token_dropout: in training, the probability that a piece is replaced by ``<unk>``: the
            label must then come from more than one telling word (word dropout, Iyyer et al. 2015).
        layer_decay: below 1, each encoder layer below the top trains at this factor of the
            rate above it (layer-wise decay, for fine-tuning a pretrained encoder: ``init_from``;
            ``tasks.build.layer_decay_groups``); 1.0 = one rate.
        adversarial_eps: > 0 adds adversarial training (Miyato et al. 2017): each batch is also
            scored with its piece embeddings moved in the direction that raises the loss most,
            by ``adversarial_eps`` times the sentence's own embedding norm, and that loss is
            added (``train/adv_loss``; ``tasks.adversarial``). About twice the training time.
        mixup, cutmix: images (mixup: speech frames too): above 0, each training batch's inputs
            are mixed in pairs, by blending (mixup, Zhang et al. 2018) or by pasting a box of one
            image into the other (CutMix, Yun et al. 2019), the mix weight drawn from Beta(a, a)
            with ``a`` the value given; the loss mixes the two labels' losses alike
            (``tasks.mixing``). Both set: one of the two for each batch, with equal odds. 0 = off.
        teacher: a classification checkpoint, or a list of them (their ensemble), to distil
            from: the loss is ``(1 - distill_weight)`` × cross-entropy with the labels plus
            ``distill_weight`` × :func:`distillation_loss` at ``distill_temperature``.
        distill_online: images only: the teacher classifies each training batch as the student
            sees it (mixed by mixup or CutMix), as DeiT's teacher does (Touvron et al. 2021),
            rather than each training image once; its models are kept out of the checkpoint.
        speaker_adversarial: > 0 adds speaker-adversarial training (``tasks.speaker_adversary``;
            Ganin et al. 2016, Meng et al. 2018): a small classifier learns each training
            recording's speaker from the pooled vector, and the encoder gets that loss's gradient
            reversed, times this weight (ramped up from 0 over the run), so the vector keeps less
            of the training voices. Logged: ``train/speaker_loss``, ``train/speaker_acc``. Needs
            ``speakers``; 0 = off.
        speakers: the training recordings' speakers (a speech manifest's third column; from the
            data module).
        tokenizer: the tokenizer JSON (``SubwordTokenizer.to_str``); kept out of hparams.
    """

    kind = kinds.CLASSIFICATION

    task_name = kind.name
    default_optimizer = ADAMW

    def __init__(
        self,
        model: dict,
        piece_vocab_size: Annotated[int, Range(1, 2**24)],
        pad_id: Annotated[int, Range(0, 2**24)],
        labels: Sequence[str],
        data: dict,
        label_names: Sequence[str] | None = None,
        label_smoothing: Annotated[float, Probability()] = 0.0,
        lr: Annotated[float, Range(0, 10)] = 5e-4,
        optimizer: dict | None = None,
        warmup_steps: Annotated[int, Range(0, 2**40)] = 200,
        warmup: Annotated[float | None, Range(0, 1)] = None,
        schedule: str = "linear",
        token_dropout: float = 0.0,
        layer_decay: float = 1.0,
        adversarial_eps: float = 0.0,
        mixup: Annotated[float, Range(0, 100)] = 0.0,
        cutmix: Annotated[float, Range(0, 100)] = 0.0,
        teacher: str | list[str] | None = None,
        distill_weight: float = 0.5,
        distill_temperature: float = 1.0,
        distill_online: bool = False,
        speaker_adversarial: Annotated[float, Range(0, 100)] = 0.0,
        speakers: Sequence[str] | None = None,
        tokenizer: str | None = None,
    ) -> None:
        super().__init__()
        if schedule not in ("linear", "inverse_sqrt"):
            raise ValueError(f"schedule must be 'linear' or 'inverse_sqrt', got {schedule!r}")
        if not 0 < layer_decay <= 1:
            raise ValueError(f"task.layer_decay={layer_decay!r}: expected a factor in (0, 1] (1.0 = off)")
        check_eps(adversarial_eps)
        if (cutmix > 0 and kinds.input_kind(data) is not kinds.PATCHES
                or mixup > 0 and kinds.input_kind(data) not in (kinds.PATCHES, kinds.FRAMES)):
            raise ValueError(f"task.mixup={mixup!r}, task.cutmix={cutmix!r}: mixing blends images (mixup: images or "
                             f"speech frames); this run reads {kinds.input_kind(data).name}")
        if not 0 <= distill_weight <= 1:
            raise ValueError(f"task.distill_weight={distill_weight!r}: expected a weight in [0, 1]")
        if not distill_temperature > 0:
            raise ValueError(f"task.distill_temperature={distill_temperature!r}: expected a temperature above 0")
        if distill_online and kinds.input_kind(data) is not kinds.PATCHES:
            raise ValueError(f"task.distill_online=true: the teacher reads each training batch's images; this run "
                             f"reads {kinds.input_kind(data).name}")
        check_speakers(speaker_adversarial, speakers)
        self.save_hyperparameters(ignore=["tokenizer"])
        # ``data_labels`` match the files (gold labels, teachers); ``labels`` are what outputs show.
        self.data_labels = list(labels)
        self.labels = check_label_names(label_names, self.data_labels, "label_names") or list(labels)
        self.model = build_model(model, vocab_size=piece_vocab_size, pad_id=pad_id, n_classes=len(self.labels))
        self.tokenizer: SubwordTokenizer | None = SubwordTokenizer.from_str(tokenizer) if tokenizer else None
        self.speaker_adversary: SpeakerAdversary | None = None
        if speaker_adversarial > 0:
            if not hasattr(self.model, "pool"):
                raise ValueError(f"task.speaker_adversarial={speaker_adversarial!r}: the speaker classifier reads the "
                                 f"encoder's pooled vector; {type(self.model).__name__} has none")
            self.speaker_adversary = SpeakerAdversary(self.model.cfg.d_model, speakers)
        self._val_confusion: torch.Tensor | None = None
        self._teacher_probs: torch.Tensor | None = None  # (N, C) over the training rows; not saved
        self._teachers: list[torch.nn.Module] = []  # distill_online's models: a plain list, so not saved

    # ----------------------------------------------------------------- construction
    @staticmethod
    def preflight(task: dict, data: dict) -> None:
        """The task's settings against the data config, before any data is read: the teachers
        (:func:`check_teacher`) and the speakers speaker-adversarial training needs."""
        if task.get("teacher") is not None:
            check_teacher(task["teacher"])
        if task.get("speaker_adversarial"):
            check_speaker_data(task["speaker_adversarial"], data)

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``ClassificationDataModule``."""
        tok = dm.tokenizer  # None for an input kind without pieces (speech frames)
        names = dm.label_names
        speakers = getattr(dm, "speakers", None)  # recordings whose manifest names their speakers
        return dict(piece_vocab_size=tok.vocab_size if tok else 1, pad_id=tok.pad_id if tok else 0,
                    labels=list(dm.labels), label_names=list(names) if names else None, data=dm.settings(),
                    tokenizer=tok.to_str() if tok else None, **({"speakers": list(speakers)} if speakers else {}))

    @classmethod
    def ensemble(cls, tasks: Sequence["ClassificationTask"]) -> "ClassificationTask":
        """One task whose classifier averages ``tasks``' label probabilities (each member reads
        the text with its own tokenizer); it keeps the first task's settings. The members must
        be classification checkpoints with the same labels, else a ``ValueError`` says which."""
        first = tasks[0]
        if len(tasks) == 1:
            return first
        kinds.require_ensemble(tasks, cls.kind)
        for i, task in enumerate(tasks, start=1):
            if task.data_labels != first.data_labels:
                raise ValueError(f"ensemble member {i} has the labels {task.data_labels}, member 1 "
                                 f"{first.data_labels}")
        first.model = ClassifierEnsemble([m for t in tasks for m in t.members()])
        return first

    def members(self) -> list[tuple[torch.nn.Module, SubwordTokenizer, int]]:
        """``(model, tokenizer, max_len)`` of each model this task classifies with."""
        if isinstance(self.model, ClassifierEnsemble):
            return self.model.members()
        return [(self.model, self.tokenizer, model_max_len(self.model, int(self.hparams.model.get("max_len", 512))))]

    # ----------------------------------------------------------------- training
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(src, src_lengths=src_lengths)  # (B, C)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels, label_smoothing=self.hparams.label_smoothing)

    def on_fit_start(self) -> None:
        if teacher_paths(self.hparams.get("teacher")) and self.hparams.get("distill_online"):
            self._teachers = online_teachers(self.hparams.teacher, self.data_labels, self.hparams.data, self.device)
        elif teacher_paths(self.hparams.get("teacher")):
            dm = self.trainer.datamodule
            kind = kinds.input_kind(self.hparams)
            rows = dm.raw("train")  # the batch's ``index`` is the row's position here
            texts = rows.texts if kind is kinds.TEXT else [str(row.path) for row in rows]
            log.info("task.teacher: classifying %d training rows with %s", len(texts), self.hparams.teacher)
            self._teacher_probs = teacher_probabilities(self.hparams.teacher, self.data_labels, texts,
                                                        dm.data_dir, self.device, kind).to(self.device)

    def _hide_tokens(self, src: torch.Tensor) -> torch.Tensor:
        """``src (B, T)`` with a ``token_dropout`` fraction of its real pieces set to ``<unk>``."""
        p = self.hparams.token_dropout
        if p <= 0 or self.tokenizer is None:
            return src
        pad = self.hparams.pad_id
        hit = (torch.rand(src.shape, device=src.device) < p) & src.ne(pad)  # (B, T)
        return src.masked_fill(hit, self.tokenizer.unk_id)

    def _objective(self, batch: dict, src: torch.Tensor, input_hook=None, mixed: Mixed | None = None,
                   adversary: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of ``src (B, T)``: cross-entropy, mixed with the distillation loss;
        its parts by name (``distill``; with ``adversary``, the speaker classifier's
        ``speaker_loss``, to be added, and ``speaker_acc``: :meth:`_speaker_loss`). ``mixed``: ``src``
        mixes pairs of images, and so do the targets (each ``lam`` its own, ``1 - lam`` its
        partner's)."""
        lengths = batch.get("src_lengths") if mixed is None or mixed.lengths is None else mixed.lengths
        parts: dict[str, torch.Tensor] = {}
        if adversary and self.speaker_adversary is not None:
            vector = self.model.pool(src, input_hook, lengths).vector  # (B, D)
            logits = self.model.classify(vector)  # (B, C)
            parts = self._speaker_loss(vector, batch["speakers"], mixed)
        else:
            logits = self.model(src, input_hook, lengths)  # (B, C)
        labels = batch["labels"]  # (B,)
        loss = self._loss(logits, labels)
        if mixed is not None:
            loss = mixed.lam * loss + (1 - mixed.lam) * self._loss(logits, labels[mixed.partner])
        if self._teachers:
            with torch.no_grad():  # the images as the student sees them, mixed or not
                target = torch.stack([torch.softmax(m(src).float(), -1) for m in self._teachers]).mean(0)  # (B, C)
        elif self._teacher_probs is None:
            return loss, parts
        else:
            target = self._teacher_probs[batch["index"]]  # (B, C)
            if mixed is not None:
                target = mixed.lam * target + (1 - mixed.lam) * target[mixed.partner]
        w = self.hparams.distill_weight
        soft = distillation_loss(logits, target, self.hparams.distill_temperature)
        return (1 - w) * loss + w * soft, {**parts, "distill": soft}

    def _speaker_loss(self, vector: torch.Tensor, speakers: Sequence[str], mixed: Mixed | None) -> dict:
        """The speaker classifier's cross-entropy on ``vector (B, D)`` (its gradient reversed into
        the encoder, times ``speaker_adversarial`` ramped over the run) and its accuracy."""
        ids = self.speaker_adversary.ids(speakers, vector.device)  # (B,)
        trainer = self._trainer
        total = max(int(trainer.estimated_stepping_batches), 1) if trainer is not None else 1
        weight = self.hparams.speaker_adversarial * ramp(self.global_step / total)
        loss, logits = self.speaker_adversary.loss(vector, ids, weight)
        if mixed is not None:
            loss = mixed.lam * loss + (1 - mixed.lam) * F.cross_entropy(logits.float(), ids[mixed.partner])
        return {"speaker_loss": loss, "speaker_acc": logits.detach().argmax(-1).eq(ids).float().mean()}

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        src = self._hide_tokens(batch["src"])  # (B, T), or (B, C, H, W) images
        mixup, cutmix = self.hparams.get("mixup", 0.0), self.hparams.get("cutmix", 0.0)
        if kinds.input_kind(self.hparams) is kinds.FRAMES:
            mixed = mix_frames(src, batch["src_lengths"], mixup) if mixup > 0 else None
        else:
            mixed = mix_images(src, mixup, cutmix) if mixup > 0 or cutmix > 0 else None
        src = src if mixed is None else mixed.src
        eps = self.hparams.adversarial_eps
        seen = InputCapture() if eps > 0 else None
        loss, parts = self._objective(batch, src, seen, mixed, adversary=True)
        n = batch["labels"].numel()
        for name, value in parts.items():
            self.log(f"train/{name}", value, batch_size=n)
        if seen is not None:
            r = adversarial_shift(loss, seen.x, eps)  # (B, T, D)
            adv, _ = self._objective(batch, src, lambda x: x + r, mixed)
            self.log("train/adv_loss", adv, batch_size=n)
            loss = loss + adv
        if "speaker_loss" in parts:  # its gradient reaches the encoder reversed
            loss = loss + parts["speaker_loss"]
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_confusion = torch.zeros(len(self.labels), len(self.labels), dtype=torch.long, device=self.device)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        logits = self.model(batch["src"], src_lengths=batch.get("src_lengths"))  # (B, C)
        labels = batch["labels"]  # (B,)
        n = labels.numel()
        self._val_confusion += confusion_matrix(labels, logits.argmax(-1), len(self.labels))
        # Weighted by sentences, Lightning's epoch mean is the split's accuracy and mean loss.
        self.log("val/loss", self._loss(logits, labels), prog_bar=True, batch_size=n, sync_dist=True)
        self.log("val/acc", logits.argmax(-1).eq(labels).float().mean(), prog_bar=True, batch_size=n, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        confusion = self._val_confusion
        if self.trainer.world_size > 1:
            confusion = self.trainer.strategy.reduce(confusion, reduce_op="sum")
        self.log("val/f1", classification_metrics(confusion.cpu(), self.labels)["macro_f1"], prog_bar=True)

    def configure_optimizers(self):
        return optimizer_with_warmup(self, self.hparams, self._trainer)

    # ----------------------------------------------------------------- inference
    def classifier(self, max_tokens: int = 4096, device: str | torch.device | None = None) -> SentenceClassifier:
        """A :class:`~transformer.inference.classifier.SentenceClassifier` with this model (or
        ensemble) and its tokenizer; ``device``: ``None`` keeps the model's."""
        if kinds.input_kind(self.hparams) is kinds.FRAMES:
            return AudioClassifier(self.members(), self.labels, self.hparams.data, max(max_tokens, 20_000), device)
        if kinds.input_kind(self.hparams) is kinds.PATCHES:  # max_tokens counts pieces; a batch of images is fewer
            return ImageClassifier(self.members(), self.labels, self.hparams.data, min(max_tokens, 256), device)
        return SentenceClassifier(self.members(), self.labels, max_tokens, device)

    def evaluate(self, split: str, decode_cfg: dict | None = None, output_dir: Path | str = "eval",
                 data_dir: str = "data/cache", mirror_root: str | None = None,
                 device: str | torch.device = "cpu") -> dict:
        """Classify a split (``train``/``dev``/``test`` of the checkpoint's data, or a file in
        the same format) and score it (``evaluation.classification``; ``decode_cfg``,
        ``data_dir`` and ``mirror_root`` are unused: the checkpoint names its files)."""
        return evaluate_classification(self.classifier(device=device), self.hparams.data, split, output_dir,
                                       data_labels=self.data_labels)


__all__ = ["ClassificationTask", "check_teacher", "distillation_loss", "online_teachers", "teacher_probabilities"]
