"""Tiny audio files made at test time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf


def write_wav(path: Path, samples: np.ndarray, rate: int, subtype: str = "PCM_16") -> Path:
    """A WAV file of ``samples`` ((N,) or (N, channels) floats)."""
    sf.write(str(path), samples, rate, subtype=subtype, format="WAV")
    return path


def sine(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    """``(N,)`` float32 sine wave."""
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)
