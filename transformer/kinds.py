"""What a task is and what its input is, each declared once; every command asks, none compares names.

A **task kind** is one of the lectures' output shapes (one output per token, a generated
sequence, one label per sequence) or BERT's pretraining, with what follows from it: the commands
that read its checkpoints, whether its model generates left to right from a start token, and how
a message names it. A checkpoint records its task kind's ``name`` (``tasks.checkpoint.TASK_KEY``);
each task class carries its kind as ``kind`` (``tasks/*.py``).

An **input kind** is what the encoder reads (the lectures' point: self-attention takes a set of
vectors, whatever made them): ``text`` is token ids through the embedding table; ``frames`` is
audio features through a subsampling front end (``modules.frontends``); ``patches`` is an image cut
into non-overlapping patches, each a vector (``modules.frontends.PatchEmbedding``); ``nodes`` is a
graph's node feature rows through a linear front end, the adjacency an attention mask. It is
declared once, as the data config's ``input`` key, which the run's hyperparameters carry into its checkpoint;
:func:`input_kind` reads it back.

This module imports nothing of the project, so every layer may ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class TaskKind:
    """One task kind.

    Fields:
        name: what a checkpoint records (``transformer_task``) and a config's task is called.
        what: how a message names its checkpoints (``"a translation"``).
        shape: the lectures' output shape: ``"sequence"`` (generated), ``"per_token"``,
            ``"label"`` (one per sequence) or ``"masked"`` (pretraining's filled pieces).
        commands: the commands that read its checkpoints (``decode``, ``tag`` ...).
        generates_from_start: the decoder generates left to right from a start token, which a
            target-language tag may replace (autoregressive translation).
        recipe: the command that trains one, for a refusal's hint.
    """

    name: str
    what: str
    shape: str
    commands: frozenset[str]
    generates_from_start: bool = False
    recipe: str = ""


_TRANSLATES = frozenset({"decode", "evaluate", "distill", "serve", "inspect", "export", "average"})
TRANSLATION = TaskKind("translation", "an autoregressive translation", "sequence", _TRANSLATES,
                       generates_from_start=True, recipe="transformer-train experiment=multi30k_cpu")
NAT = TaskKind("nat", "a Mask-Predict translation", "sequence", _TRANSLATES - {"inspect"},
               recipe="transformer-train experiment=multi30k_nat_cpu")
CTC = TaskKind("nat_ctc", "a CTC translation", "sequence", _TRANSLATES - {"inspect"},
               recipe="transformer-train experiment=multi30k_nat_ctc_cpu")
TAGGING = TaskKind("tagging", "a tagging", "per_token", frozenset({"tag", "evaluate", "serve", "inspect", "average"}),
                   recipe="transformer-train experiment=gum_upos")
CLASSIFICATION = TaskKind("classification", "a classification", "label",
                          frozenset({"classify", "evaluate", "serve", "inspect", "average"}),
                          recipe="transformer-train experiment=sst2 or classify")
MLM = TaskKind("mlm", "a masked-LM", "masked", frozenset({"fill", "inspect", "export", "average"}),
               recipe="transformer-train experiment=pretrain")
NODE_CLASSIFICATION = TaskKind("node_classification", "a node classification", "per_token",
                               frozenset({"evaluate", "inspect"}),
                               recipe="transformer-train experiment=graph_nodes data.preset=cora")
#: Every task kind by name: the one list of them.
TASK_KINDS: dict[str, TaskKind] = {k.name: k for k in (TRANSLATION, NAT, CTC, TAGGING, CLASSIFICATION, MLM,
                                                       NODE_CLASSIFICATION)}


def task_kind(task: Any) -> TaskKind | None:
    """The kind of a task (or task class, or checkpoint dict); None: not one of ours."""
    if isinstance(task, Mapping):
        return TASK_KINDS.get(task.get("transformer_task"))
    return getattr(task, "kind", None)


def readers(command: str) -> list[TaskKind]:
    """The task kinds whose checkpoints ``command`` reads."""
    return [k for k in TASK_KINDS.values() if command in k.commands]


def reads(task: Any, command: str) -> bool:
    """Whether ``command`` reads ``task``'s checkpoints."""
    kind = task_kind(task)
    return kind is not None and command in kind.commands


def require(task: Any, command: str, where: str = "ckpt_path") -> TaskKind:
    """``task``'s kind, when ``command`` reads it; else a ``ValueError`` naming what the command
    reads and how to train one."""
    kind = task_kind(task)
    if kind is not None and command in kind.commands:
        return kind
    wanted = readers(command)
    names = " or ".join(k.what for k in wanted)
    hint = f" ({wanted[0].recipe})" if len(wanted) == 1 and wanted[0].recipe else ""
    got = kind.what if kind is not None else f"a {getattr(task, 'task_name', '?')!r}"
    raise ValueError(f"{where}: {got} checkpoint; transformer-{command} reads {names} checkpoints{hint}")


def require_ensemble(tasks: Sequence[Any], kind: TaskKind) -> None:
    """Checkpoints to ensemble, each of ``kind``; else a ``ValueError`` naming the first that is not."""
    for i, task in enumerate(tasks, start=1):
        got = task_kind(task)
        if got is not kind:
            what = got.what if got is not None else "an unknown"
            raise ValueError(f"ensemble member {i} is {what} checkpoint; {kind.what} ensemble takes "
                             f"{kind.what.removeprefix('a ').removeprefix('an ')} checkpoints only")


@dataclass(frozen=True)
class InputKind:
    """One input kind.

    Fields:
        name: the data config's ``input`` value.
        one_input: what one input is on a command's standard input or file (for messages).
        frontend: the model's front end class (``modules.frontends``), or None for the token
            embedding.
    """

    name: str
    one_input: str
    frontend: str | None = None


TEXT = InputKind("text", "a line of text")
FRAMES = InputKind("frames", "an audio file's path", frontend="ConvSubsampling")
PATCHES = InputKind("patches", "an image file's path", frontend="PatchEmbedding")
NODES = InputKind("nodes", "a graph's node", frontend="NodeFeatures")
#: Every input kind by name.
INPUT_KINDS: dict[str, InputKind] = {k.name: k for k in (TEXT, FRAMES, PATCHES, NODES)}


def input_kind(hparams: Mapping[str, Any] | None) -> InputKind:
    """The input kind a run's hyperparameters (or a data config) declare; text when they name none."""
    data = (hparams or {}).get("data", hparams) or {}
    name = data.get("input", "text") if isinstance(data, Mapping) else "text"
    if name not in INPUT_KINDS:
        raise ValueError(f"data.input={name!r}: unknown input kind (known: {', '.join(INPUT_KINDS)})")
    return INPUT_KINDS[name]


__all__ = ["CLASSIFICATION", "CTC", "FRAMES", "INPUT_KINDS", "InputKind", "MLM", "NAT", "NODES", "NODE_CLASSIFICATION",
           "PATCHES", "TAGGING", "TASK_KINDS", "TEXT", "TRANSLATION", "TaskKind", "input_kind", "readers", "reads",
           "require", "require_ensemble", "task_kind"]
