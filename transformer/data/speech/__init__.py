"""Speech: audio files in, log-mel frames out, from a user's manifest or the FSDD preset.

``audio.py`` reads a file (libsndfile) as one float32 channel at the model's sample rate (soxr
resamples), or raises one :class:`AudioError` line naming file and row; ``features.py`` frames it
(25 ms windows every 10 ms, log-mel, per-utterance or per-speaker normalisation, SpecAugment
masks for training); ``manifest.py`` reads and writes ``audio path<TAB>transcript`` TSVs (a
speaker column optional), the main path;
``dataset.py`` is the torch Dataset over manifest rows and the collate that pads frames;
``fsdd.py`` is the Free Spoken Digit Dataset preset (fetched like every dataset, written as
manifests) and the connected digit strings made from it. The model's speech front end is
:class:`transformer.modules.frontends.ConvSubsampling`.

Needs the ``speech`` extra (soundfile, soxr, librosa).
"""

from transformer.data.speech.audio import MODEL_SAMPLE_RATE, AudioError, load_audio, read_audio
from transformer.data.speech.dataset import SpeechCollator, SpeechDataset
from transformer.data.speech.features import (FeatureSettings, MaskingSettings, compute_features, log_mel,
                                              spec_augment)
from transformer.data.speech.manifest import SpeechRow, read_manifest, write_manifest

__all__ = [
    "MODEL_SAMPLE_RATE",
    "AudioError",
    "FeatureSettings",
    "MaskingSettings",
    "SpeechCollator",
    "SpeechDataset",
    "SpeechRow",
    "compute_features",
    "load_audio",
    "log_mel",
    "read_audio",
    "read_manifest",
    "spec_augment",
    "write_manifest",
]
