"""A transcript checkpoint behind the API: speech in (input kind ``frames``, ``transformer.kinds``),
text out, by CTC or the autoregressive decoder, on ``/v1/translate`` (``served.TranslationModel``'s
decoding options, limits and batching); each input is an audio file in base64, as a JSON body
carries an upload, and the answer is what ``transformer-decode`` writes for the file's path.
"""

from __future__ import annotations

from typing import Hashable, Sequence

from transformer.serve.served import RequestError, TranslationModel, audio_warm_up, uploaded


class TranscriptionModel(TranslationModel):
    """A sequence-to-sequence speech checkpoint (input kind ``frames``, ``transformer.kinds``; CTC
    or autoregressive) on ``/v1/translate``: each input is one audio file (WAV, FLAC ...) encoded
    in base64, as an audio classifier's upload; ``translation`` is its transcript (``"4 1 7 9"``),
    as ``transformer-decode`` writes it for the file's path. Requests take the decoding options of
    the strategy (``decoding.strategies``), no languages and no attention. The files are decoded in a
    private temporary folder removed after the request; a file that is not base64 or not audio is a
    422 naming the input."""

    def __init__(self, *args, **kwargs):
        from transformer.data.speech.datamodule import feature_settings

        super().__init__(*args, **kwargs)
        self.options = tuple(o for o in self.options if o != "attention")
        self.attends = False
        self.sample_rate = feature_settings(dict(self.task.hparams.data)).sample_rate
        self.frames_per_byte = 100 / (2 * self.sample_rate)
        self.warm_up_input = audio_warm_up(self.sample_rate)

    def describe(self) -> str:
        return f"a transcription model, decode={self.strategy.name}"

    def texts(self, inputs: Sequence[str], overrides: dict) -> list:
        if overrides.get("pivot") is not None:
            raise RequestError(f"model '{self.id}': pivot: a transcription model writes one language")
        return list(inputs)

    def count_tokens(self, text: str) -> int:
        return max(1, int(len(text) * 3 / 4 * self.frames_per_byte))  # frames of 16-bit audio, about

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        from transformer.data.speech.audio import AudioError

        with uploaded(texts, "an audio file", AudioError) as paths:
            return super().predict(paths, settings)


__all__ = ["TranscriptionModel"]
