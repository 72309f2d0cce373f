"""The API written down: request and response bodies as pydantic models, which FastAPI checks
requests against and publishes at ``/openapi.json``.

Requests are strict: integers must be JSON integers, unknown keys are refused, and every input
is text a model can read (no control characters other than tab, no lone surrogates). Limits
that depend on the server's config (inputs and pieces per request, beam sizes) are checked by
the app and the served model.
"""

from __future__ import annotations

import typing
import unicodedata
from typing import Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, create_model,
                      field_validator)

from transformer.decoding.settings import DecodeSettings

Number = Union[StrictInt, StrictFloat]


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be a model input (a control character, a lone surrogate), or None.
    Tabs are whitespace, as on the command line."""
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cc" and ch != "\t":
            return f"holds the control character U+{ord(ch):04X}"
        if category == "Cs":
            return f"holds a lone surrogate (U+{ord(ch):04X}), which is not text"
    return None


class Request(BaseModel):
    """What every endpoint takes: the model's id and the sentences, one output each."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr = Field(description="a model id from GET /v1/models")
    inputs: list[StrictStr] = Field(min_length=1, description="sentences, one output each, in order",
                                    examples=[["Ein Hund rennt über die Wiese."]])

    @field_validator("inputs")
    @classmethod
    def _readable(cls, inputs: list[str]) -> list[str]:
        for i, text in enumerate(inputs):
            problem = text_problem(text)
            if problem:
                raise ValueError(f"input {i} {problem}")
        return inputs

    def overrides(self) -> dict:
        """The decoding keys this request sets (``model`` and ``inputs`` aside)."""
        return {k: v for k, v in self.model_dump(exclude={"model", "inputs"}).items()
                if v is not None and k in self.model_fields_set}


# The decoding settings a request may change, typed and described by their declaration
# (decoding.settings.DecodeSettings); the server's limits on their values are the app's to check.
REQUEST_DECODE_KEYS = ("beam_size", "n_best", "max_len_a", "max_len_b", "top_k")
_STRICT = {int: StrictInt, float: Number, bool: StrictBool, str: StrictStr}


def _decode_fields(keys: tuple[str, ...]) -> dict:
    """Optional request fields for the decoding ``keys``, of their declared types and meanings."""
    hints = typing.get_type_hints(DecodeSettings)
    return {key: (Optional[_STRICT[hints[key]]], Field(None, description=DecodeSettings.describe(key)))
            for key in keys}


class _TranslateOptions(Request):
    """What a translation request may ask for besides the decoding settings."""

    max_len: Optional[StrictInt] = Field(None, description="at most this many output pieces")
    attention: StrictBool = Field(False, description="also return cross-attention and word alignments")
    tgt_lang: Optional[StrictStr] = Field(None, description="the language to translate into, one of the model's "
                                                            "target_languages (required where it has several)",
                                          examples=["fr"])
    src_lang: Optional[StrictStr] = Field(None, description="the inputs' language, one of the model's "
                                                            "source_languages: with tgt_lang, a direction it was "
                                                            "trained on")
    pivot: Optional[StrictStr] = Field(None, description="a language to translate through: src_lang into pivot, "
                                                         "then the best of each into tgt_lang, both legs directions "
                                                         "the model was trained on", examples=["en"])
    zero_shot: StrictBool = Field(False, description="with src_lang and tgt_lang: also a direction the model was "
                                                     "not trained on, from a language it reads into one it writes")


TranslateRequest = create_model(
    "TranslateRequest", __base__=_TranslateOptions, __module__=__name__,
    __doc__="Sentences to translate, with optional decoding overrides within the server's limits.",
    **_decode_fields(REQUEST_DECODE_KEYS),
)


class TagRequest(Request):
    """Sentences to tag: each one line of words separated by spaces or tabs."""


class ClassifyRequest(Request):
    """Sentences to classify."""

    top_k: Optional[StrictInt] = Field(None, description="the best labels returned, best first")
    attention: StrictBool = Field(False, description="also return the pooling's attention over tokens")


class Hypothesis(BaseModel):
    text: str
    score: float
    alignment: Optional[str] = Field(None, description="Pharaoh pairs source-target piece index (with attention)")


class TranslationAttention(BaseModel):
    source: list[str] = Field(description="source pieces, EOS last")
    target: list[str] = Field(description="output pieces, EOS last: row t is the step that predicted it")
    cross: list[list[list[list[float]]]] = Field(description="cross-attention (layer, head, target, source)")
    alignment_layer: int
    source_words: list[str] = Field(description="source words (a special token is a word alone)")
    source_word: list[int] = Field(description="the word of each source piece")
    target_words: list[str] = Field(description="output words, EOS last")
    target_word: list[int] = Field(description="the word of each output piece")
    cross_words: list[list[list[list[float]]]] = Field(
        description="cross-attention over words (layer, head, target word, source word): a source word's "
                    "pieces summed, a target word's pieces averaged")


class TranslationOutput(BaseModel):
    translation: str
    hypotheses: list[Hypothesis]
    attention: Optional[TranslationAttention] = None


class TranslateResponse(BaseModel):
    model: str
    outputs: list[TranslationOutput]


class TagOutput(BaseModel):
    words: list[str]
    tags: list[str]
    fields: dict[str, list[str]] = Field(description="the tags of each annotation the model predicts")


class TagResponse(BaseModel):
    model: str
    outputs: list[TagOutput]


class LabelProbability(BaseModel):
    label: str
    probability: float


class PoolingAttention(BaseModel):
    tokens: list[str]
    pooling: Optional[list[list[float]]] = Field(None, description="(head, token); null for a pooling without "
                                                                   "attention")
    words: list[str] = Field(default_factory=list, description="the tokens' words ([CLS] a word alone)")
    word: list[int] = Field(default_factory=list, description="the word of each token")
    pooling_words: Optional[list[list[float]]] = Field(None, description="(head, word): each word's tokens "
                                                                         "summed")


class ClassifyOutput(BaseModel):
    label: str
    probability: float
    top: list[LabelProbability]
    probabilities: dict[str, float]
    attention: Optional[PoolingAttention] = None


class ClassifyResponse(BaseModel):
    model: str
    outputs: list[ClassifyOutput]


class ModelInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    kind: str
    endpoint: str
    checkpoint: str
    options: list[str] = Field(description="request keys this model takes besides model and inputs")
    attention: bool
    directions: Optional[list[str]] = Field(None, description="translation: the directions it translates, "
                                                              "src-tgt")
    source_languages: Optional[list[str]] = Field(None, description="translation: the src_lang values it takes")
    target_languages: Optional[list[str]] = Field(None, description="translation: the tgt_lang values it takes")
    multilingual: Optional[bool] = Field(None, description="translation: one model for several directions, "
                                                           "tgt_lang chooses")
    input: Optional[str] = Field(None, description="'audio': a speech model, each input an audio file in base64 "
                                                   "(a transcription model's translation is its transcript)")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


class Health(BaseModel):
    status: str
    models: int
    queued: dict[str, int]
    calls: dict[str, int] = Field(description="model calls since start, per model")
    requests: dict[str, int] = Field(description="requests through those calls, per model")


class Ready(BaseModel):
    ready: bool = Field(description="every model loaded and warmed up")
    models: dict[str, bool] = Field(description="per model: past its warm-up call")


class ErrorResponse(BaseModel):
    error: str = Field(description="one sentence saying what was wrong")


__all__ = ["ClassifyOutput", "ClassifyRequest", "ClassifyResponse", "ErrorResponse", "Health", "Hypothesis",
           "ModelInfo", "ModelsResponse", "Ready", "Request", "TagOutput", "TagRequest", "TagResponse",
           "TranslateRequest", "TranslateResponse", "TranslationAttention", "TranslationOutput", "text_problem"]
