"""Fixtures of the speech tests: a few real FSDD recordings, fetched from the mirror."""

from __future__ import annotations

from pathlib import Path

import pytest

# Two speakers, every digit, three test takes (0-2) and four training takes (5-8): enough for
# both splits, a dev carve and leave-one-speaker-out folds, and about a second to copy.
FEW = {"speakers": ["george", "theo"], "digits": range(10), "indices": [0, 1, 2, 5, 6, 7, 8]}


@pytest.fixture(scope="session")
def fsdd_few(mirror_root: Path, tmp_path_factory):
    """FSDD recordings of :data:`FEW`, fetched from the mirror into a session cache."""
    from transformer.data.speech.fsdd import fsdd_recordings

    if not (mirror_root / "fsdd" / "recordings").is_dir():
        pytest.skip("the dataset mirror has no fsdd/")
    return fsdd_recordings(tmp_path_factory.mktemp("fsdd-cache"), mirror_root=mirror_root, **FEW)
