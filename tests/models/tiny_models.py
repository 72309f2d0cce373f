"""Tiny model builders shared by the model tests."""

from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
)

TINY = dict(d_model=16, n_heads=2, d_ff=32, dropout=0.0, max_len=64)
POSITIONALS = {
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
    "relative": RelativePositionBias,
    "none": NoPositionalEncoding,
}
