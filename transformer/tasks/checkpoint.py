"""Self-describing checkpoints: the resolved model config, the task's settings and the
tokenizers travel with the weights, so evaluation and decoding need only the path.

A checkpoint is data: it is read with ``torch.load(weights_only=True)``, its task is one of
:data:`tasks.build.TASKS`, its model is rebuilt from the registry in ``tasks/build.py``, its optimizer node
names one of ``tasks/build.py``'s optimizers, and every other setting is checked against the
constructor it is passed to before anything is built.

Settings a checkpoint keeps in an earlier form are brought to the current one on reading
(:func:`current_hyper_parameters`): flat ``betas``/``eps``/``weight_decay`` become the
``optimizer`` node, a non-autoregressive task drops the ``compile`` switch it recorded off, and
a model config that leaves out a setting whose default has changed since gets the default it
was built with (:data:`FORMER_DEFAULTS`); a checkpoint written now records those settings."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from tokenizers import Tokenizer

from transformer import kinds
from transformer.files import refusal_reason
from transformer.hub import checkpoint as hub_checkpoint, is_hub_path
from transformer.data.core.sentencepiece_tokenizer import KIND as SPM_KIND
from transformer.tasks.build import (
    TASKS,
    MODELS,
    HyperparameterError,
    check_model_config,
    check_task_settings,
    model_fields,
    optimizer_from_flat,
    registered,
    show,
    task_class,
    task_parameters,
)

TASK_KEY = "transformer_task"

# Model settings whose default became the presets' shared base (pre-norm layers, a 512-position
# table; ``models/config.py``), by model class: the default each had before, which a model
# config that leaves the setting out was built with.
FORMER_DEFAULTS: dict[str, dict[str, Any]] = {
    **{name: {"norm_first": False, "max_len": 1024}
       for name in ("EncoderDecoder", "NonAutoregressiveModel", "CTCNonAutoregressiveModel", "Tagger")},
    "SequenceClassifier": {"norm_first": False},
    # GAT's score biases (NodeClassifierConfig.score_bias) came after its layer without projections.
    "NodeClassifier": {"score_bias": False},
}


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, unreadable or not one of ours."""


class OneTokenizerCheckpoint:
    """What a task that reads one text with one tokenizer (``self.tokenizer``: the tagger, the
    classifier, the masked LM) writes into its checkpoint and reads back: its name under
    :data:`TASK_KEY` and the tokenizer's JSON under ``tokenizers.src``. Mixed in before
    ``LightningModule``, whose hooks these are."""

    task_name: str

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[TASK_KEY] = self.task_name
        record_model_settings(checkpoint)
        if self.tokenizer is not None:
            checkpoint["tokenizers"] = {"src": self.tokenizer.to_str()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        from transformer.data.core.tokenizer import SubwordTokenizer

        if "tokenizers" in checkpoint:
            self.tokenizer = SubwordTokenizer.from_str(checkpoint["tokenizers"]["src"])

    @classmethod
    def from_checkpoint_dict(cls, ckpt: dict, **extra: Any):
        """Rebuild from a checkpoint dict: its hyperparameters, its tokenizer, ``extra``
        constructor arguments, then its weights."""
        hp = current_hyper_parameters(cls, ckpt["hyper_parameters"])
        task = cls(**hp, tokenizer=(ckpt.get("tokenizers") or {}).get("src"), **extra)
        task.load_state_dict(ckpt["state_dict"])
        return task


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint dict on the CPU, with errors that name the file. ``hf:<folder>`` or
    ``hf:<hub id>``: a Hugging Face masked LM, fine-tuned classifier or Marian translation model
    read onto ours (``transformer.hub``), checked as a checkpoint is; an encoder without its head
    (``BertModel``) is refused: it only starts a model (``init_from``)."""
    if is_hub_path(path):
        ckpt = hub_checkpoint(str(path))
        if ckpt.get("encoder_only"):  # an encoder without its head starts a model, it cannot serve as one
            raise CheckpointError(f"{path}: {ckpt['encoder_only']}: nothing to predict with; fine-tune it "
                                  f"(transformer-train ... init_from={path}) or give a folder with that head")
        try:
            check_hyper_parameters(ckpt)
        except HyperparameterError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        return ckpt
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        # weights_only: the unpickler builds tensors and plain containers only, so a crafted
        # file cannot run code. Everything the project stores (weights, hyperparameters as
        # plain dicts, tokenizer JSON, Lightning's loop/optimizer/callback state, the random
        # generator states) is of those types.
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" not in str(exc):  # garbage, not a refused object
            raise CheckpointError(f"{path} is not a readable checkpoint ({refusal_reason(exc)})") from None
        raise CheckpointError(
            f"{path} was refused: loading it would need more than tensors and plain containers "
            f"({refusal_reason(exc)}); transformer-train never writes such a checkpoint"
        ) from None
    except Exception as exc:  # zip and EOF errors all mean "not a checkpoint"
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {one_line(exc)})") from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not a checkpoint dict")
    missing = [k for k in (TASK_KEY, "hyper_parameters", "state_dict") if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"{path} lacks {', '.join(missing)}: it was not written by transformer-train"
        )
    if not isinstance(ckpt[TASK_KEY], str) or ckpt[TASK_KEY] not in TASKS:
        raise CheckpointError(f"{path}: unknown task {show(ckpt[TASK_KEY])}; known: {sorted(TASKS)}")
    if isinstance(ckpt["hyper_parameters"], dict) and "model" in ckpt["hyper_parameters"]:
        # what every reader of the file sees (init_from compares these settings with the run's)
        ckpt["hyper_parameters"]["model"] = with_former_defaults(ckpt["hyper_parameters"]["model"])
    try:
        check_hyper_parameters(ckpt)
    except HyperparameterError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return ckpt


def check_hyper_parameters(ckpt: dict[str, Any]) -> None:
    """Check a checkpoint's settings as data before anything is built from them: the model
    config against the model registry (``tasks/build.py``), the optimizer node against the
    optimizer registry, the task's other settings against its constructor, no key naming code to
    run anywhere, tokenizers as strings. A violation is a :class:`HyperparameterError` naming the
    key."""
    hp = ckpt["hyper_parameters"]
    if not isinstance(hp, dict):
        raise HyperparameterError(f"hyper_parameters={show(hp)}: expected a mapping")
    cls = task_class(ckpt[TASK_KEY])
    hp = current_hyper_parameters(cls, hp)
    check_model_config(hp.get("model"), "hyper_parameters.model", complete=False)
    check_task_settings(cls, {k: v for k, v in hp.items() if k != "model"}, "hyper_parameters")
    tokenizers = ckpt.get("tokenizers")
    if tokenizers is not None and not (isinstance(tokenizers, dict)
                                       and all(isinstance(v, str) for v in tokenizers.values())):
        raise HyperparameterError(f"tokenizers={show(tokenizers)}: expected a mapping of JSON strings")
    for name, text in (tokenizers or {}).items():
        try:
            if text.lstrip().startswith("{") and f'"type": "{SPM_KIND}"' in text[:40]:
                continue  # a SentencePiece tokenizer's JSON (Marian's), read when the task is built
            Tokenizer.from_str(text)
        except Exception as exc:  # the tokenizers library raises a bare Exception
            raise HyperparameterError(f"tokenizers.{name}: not a tokenizer ({one_line(exc)})") from None


def _model_class(model_cfg: Any) -> type | None:
    try:
        return registered(model_cfg.get("_target_"), MODELS, "model") if isinstance(model_cfg, Mapping) else None
    except HyperparameterError:  # reported by the checks
        return None


def with_former_defaults(model_cfg: Any) -> Any:
    """A checkpoint's model config with each setting it leaves out of :data:`FORMER_DEFAULTS`
    filled in (what its model was built with); anything else as it is."""
    cls = _model_class(model_cfg)
    former = FORMER_DEFAULTS.get(cls.__name__, {}) if cls is not None else {}
    missing = {k: v for k, v in former.items() if k not in model_cfg}
    return {**model_cfg, **missing} if missing else model_cfg


def record_model_settings(checkpoint: dict) -> None:
    """Write into a checkpoint being saved the model settings of :data:`FORMER_DEFAULTS` that its
    model config leaves to today's defaults, so that reading it never takes the former ones."""
    hp = checkpoint.get("hyper_parameters")
    model_cfg = hp.get("model") if hp is not None else None
    cls = _model_class(model_cfg)
    if cls is None:
        return
    fields = model_fields(cls)
    missing = {k: fields[k].default for k in FORMER_DEFAULTS.get(cls.__name__, {}) if k not in model_cfg}
    if missing:
        hp["model"] = {**model_cfg, **missing}


def current_hyper_parameters(cls: type, hp: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's settings in the form ``cls`` takes today (see the module docstring); the
    current form is returned as it is."""
    if "model" in hp:
        hp = {**hp, "model": with_former_defaults(hp["model"])}
    hp = optimizer_from_flat(hp, cls.default_optimizer)
    if "compile" not in task_parameters(cls) and not hp.get("compile"):
        hp = {k: v for k, v in hp.items() if k not in ("compile", "compile_mode")}
    return hp


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's message on one line (whitespace collapsed), cut to ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_weights(task, ckpt: dict[str, Any], path: str | Path) -> None:
    """``task.load_state_dict(ckpt["state_dict"])``; a missing or unexpected parameter or a
    wrong shape (a hand-edited file) is a :class:`CheckpointError` naming the file."""
    try:
        task.load_state_dict(ckpt["state_dict"])
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: its weights do not fit the model it describes: {one_line(exc)}") from None


def tokenizer_sides(task: str) -> tuple[str, ...]:
    """The ``tokenizers`` entries a task reads text with: a translation task's source and
    target, any other task's one (``src``)."""
    return ("src", "tgt") if hasattr(task_class(task), "set_tokenizers") else ("src",)


def missing_tokenizers(ckpt: dict[str, Any], sides: Sequence[str] | None = None) -> list[str]:
    """The ``tokenizers.<side>`` entries (``sides``, default the task's) the checkpoint lacks; an
    input kind other than text reads its source without one (``transformer.kinds``)."""
    sides = tokenizer_sides(ckpt[TASK_KEY]) if sides is None else sides
    if kinds.input_kind(ckpt.get("hyper_parameters")).frontend is not None:
        sides = [side for side in sides if side != "src"]
    tokenizers = ckpt.get("tokenizers") or {}
    return [side for side in sides if not tokenizers.get(side)]


def check_tokenizers(ckpt: dict[str, Any], path: str | Path) -> None:
    """A checkpoint read for its text (decoding, tagging, filling, serving, exporting) must carry
    its tokenizers: without one its ids mean nothing. transformer-train always writes them, so a
    missing one is a hand-edited or foreign file: a :class:`CheckpointError` naming it."""
    missing = missing_tokenizers(ckpt)
    if missing:
        raise CheckpointError(f"{path} carries no tokenizer ({tokenizers_entry(ckpt, missing)}): its ids cannot be "
                              f"read as text; use a checkpoint as transformer-train wrote it, the tokenizer "
                              f"beside the weights")


def tokenizers_entry(ckpt: dict[str, Any], missing: Sequence[str]) -> str:
    """What is missing, as the checkpoint's keys: its ``'tokenizers'`` entry, or some of its sides."""
    if not ckpt.get("tokenizers"):
        return "its 'tokenizers' entry is missing"
    return ", ".join(f"tokenizers.{side}" for side in missing) + " missing"


def load_task(path: str | Path | Sequence[str | Path], text: bool = True):
    """Rebuild a task (model + tokenizers) from a checkpoint alone, in eval mode on the CPU.

    Several paths (a list, or Hydra's ``ckpt_path=[a.ckpt,b.ckpt]``) give one task that
    decodes with the ensemble of their models: ``TranslationTask.ensemble``, or
    ``TaggingTask.ensemble`` / ``ClassificationTask.ensemble`` when the first checkpoint is a
    tagger / a classifier. ``text``: the task will read text, so each checkpoint must carry its
    tokenizers (:func:`check_tokenizers`); a model looked at alone (its position table) needs none.
    """
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    if not paths:
        raise CheckpointError("no checkpoint given (ckpt_path is an empty list)")
    tasks = []
    for p in paths:
        ckpt = read_checkpoint(p)
        if text:
            check_tokenizers(ckpt, p)
        try:
            task = task_class(ckpt[TASK_KEY]).from_checkpoint_dict(ckpt)
        except HyperparameterError as exc:
            raise CheckpointError(f"{p}: {exc}") from None
        except (RuntimeError, TypeError, KeyError, ValueError, AttributeError) as exc:
            # A hand-edited file: a hyperparameter or weight missing, a shape changed.
            raise CheckpointError(f"{p}: cannot rebuild its model ({type(exc).__name__}: {one_line(exc)})") from None
        task.eval()
        tasks.append(task)
    if len(tasks) == 1:
        return tasks[0]
    # The first checkpoint's task decides: a tagging or classification ensemble, else a
    # translation one.
    kind = tasks[0].kind
    return task_class(kind.name if kind.shape in ("per_token", "label") else kinds.TRANSLATION.name).ensemble(tasks)
