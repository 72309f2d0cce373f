"""Where every data file comes from, and how it gets onto this machine.

Each file is named by its path relative to a dataset root (the same layout as the
upstream repositories, and as the offline mirror), its commit-pinned upstream URL and
its sha256. :func:`fetch` resolves a relative path, in order, from

1. the local cache ``cache_dir/relpath`` (checksum verified),
2. a mirror root (the ``mirror_root`` argument, else ``$TRANSFORMER_DATA_MIRROR``),
   copied into the cache (verified) so that later starts hit the cache,
3. an HTTP download of the upstream URL (or ``base_url/relpath`` when a base URL
   override is given, which is how tests stand a local ``http.server`` in for GitHub).

Every write is atomic: a temporary file in the cache folder, sha256 check, then
``os.replace``. A failed download or a checksum mismatch leaves no file behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from transformer.files import sha256_file

log = logging.getLogger(__name__)

MIRROR_ENV = "TRANSFORMER_DATA_MIRROR"
BASE_URL_ENV = "TRANSFORMER_DATA_BASE_URL"


class ChecksumError(RuntimeError):
    """A file's sha256 differs from the registry; names the source and both hashes."""

    def __init__(self, url: str, expected: str, actual: str):
        super().__init__(f"checksum mismatch for {url}: expected sha256 {expected}, got {actual}")
        self.url, self.expected, self.actual = url, expected, actual


class DownloadError(RuntimeError):
    """A download failed or ended early (the partial file has been removed)."""


@dataclass(frozen=True)
class Source:
    """One upstream file: relative path (= mirror/cache layout), pinned URL, sha256."""

    relpath: str
    url: str
    sha256: str


MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
GUM_COMMIT = "5ae58e9b57c907e6047cad319beff9dce940f391"
NLTK_DATA_COMMIT = "5db857e6f7df11eabb5e5665836db9ec8df07e28"

_MULTI30K_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/"
_GUM_URL = f"https://raw.githubusercontent.com/UniversalDependencies/UD_English-GUM/{GUM_COMMIT}/"
_NLTK_URL = f"https://raw.githubusercontent.com/nltk/nltk_data/{NLTK_DATA_COMMIT}/packages/corpora/"

# (relative path, sha256); the URL follows from the path.
_MULTI30K_SUMS = {
    "test_2016_flickr.cs": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.cs": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
    "test_2018_flickr.de": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "train.cs": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}
_GUM_SUMS = {
    "LICENSE.txt": "82d07ae3108a34ba9c76e927bd2a3882d5e4bdf742eadf09f2cd0e2757c5c167",
    "en_gum-ud-dev.conllu": "483652db6ff0233036cf93bb2d327638c42c4efc25170f219cec96550f5e1d07",
    "en_gum-ud-test.conllu": "92d07f249d5acd6f4de2e33c87f150b3ad8cea132837d24eb01f9cf5970d0ce2",
    "en_gum-ud-train.conllu": "dbaed6e897c6ee9d8756a551850a9d5fb6317cae0598d4a52a105a1c8fcc2753",
}


def _build_registry() -> dict[str, Source]:
    reg: dict[str, Source] = {}
    for stem, sha in _MULTI30K_SUMS.items():
        rel = f"multi30k/data/task1/raw/{stem}.gz"
        reg[rel] = Source(rel, _MULTI30K_URL + f"data/task1/raw/{stem}.gz", sha)
    for name, sha in _GUM_SUMS.items():
        rel = f"ud-english-gum/r2.5/{name}"
        reg[rel] = Source(rel, _GUM_URL + name, sha)
    rel = "nltk-conll2000/conll2000.zip"
    reg[rel] = Source(
        rel,
        _NLTK_URL + "conll2000.zip",
        "01e65164f268366e7caa0db92332a1955d081908c87016e2c7640c3c5279b7cd",
    )
    return reg


#: Every known file, keyed by its relative path.
DATASETS: dict[str, Source] = _build_registry()

MULTI30K_LANGS = ("en", "de", "fr", "cs")
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
GUM_SPLITS = ("train", "dev", "test")


def multi30k_relpath(split: str, lang: str) -> str:
    """Relative path of one Multi30k task-1 file; a clear error for what upstream lacks."""
    if lang not in MULTI30K_LANGS:
        raise ValueError(f"Multi30k language {lang!r} unknown; choose from {MULTI30K_LANGS}")
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"Multi30k split {split!r} unknown; choose from {MULTI30K_SPLITS}")
    rel = f"multi30k/data/task1/raw/{split}.{lang}.gz"
    if rel not in DATASETS:
        raise ValueError(f"Multi30k has no {split} split for language {lang!r} (upstream never released it)")
    return rel


def gum_relpath(split: str) -> str:
    """Relative path of one UD English-GUM 2.5 CoNLL-U file."""
    if split not in GUM_SPLITS:
        raise ValueError(f"GUM split {split!r} unknown; choose from {GUM_SPLITS}")
    return f"ud-english-gum/r2.5/en_gum-ud-{split}.conllu"


CONLL2000_RELPATH = "nltk-conll2000/conll2000.zip"


def resolve_mirror_root(mirror_root: str | os.PathLike | None = None) -> Path | None:
    """The mirror root argument, else ``$TRANSFORMER_DATA_MIRROR``, else None."""
    if mirror_root is not None:
        return Path(mirror_root)
    env = os.environ.get(MIRROR_ENV)
    return Path(env) if env else None


def _atomic_copy(src_stream, dest: Path, expected: str, url: str, expected_size: int | None = None) -> None:
    """Stream ``src_stream`` into ``dest`` atomically; verify size and sha256 before publishing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        h = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: src_stream.read(1 << 16), b""):
                h.update(chunk)
                out.write(chunk)
                size += len(chunk)
        # http.client returns a short body without error when the peer closes early.
        if expected_size is not None and size != expected_size:
            raise DownloadError(f"{url}: connection closed after {size} of {expected_size} bytes")
        actual = h.hexdigest()
        if actual != expected:
            raise ChecksumError(url, expected, actual)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def fetch(
    relpath: str,
    cache_dir: str | os.PathLike = "data/cache",
    mirror_root: str | os.PathLike | None = None,
    base_url: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """Return a local, checksum-verified path for the registered file ``relpath``.

    Order: cache → mirror root (argument, else ``$TRANSFORMER_DATA_MIRROR``) → HTTP.
    ``base_url`` (else ``$TRANSFORMER_DATA_BASE_URL``) replaces the upstream URL by
    ``base_url/relpath``. Raises ``KeyError`` for an unregistered path,
    :class:`ChecksumError` on a mismatch, ``FileNotFoundError`` for a mirror root that is
    not a folder, and :class:`DownloadError` when the download fails; no partial file is
    ever left in the cache.
    """
    if relpath not in DATASETS:
        raise KeyError(f"{relpath!r} is not in the data registry (transformer.data.core.sources.DATASETS)")
    return fetch_source(DATASETS[relpath], cache_dir, mirror_root, base_url, timeout)


def fetch_source(
    src: Source,
    cache_dir: str | os.PathLike = "data/cache",
    mirror_root: str | os.PathLike | None = None,
    base_url: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """:func:`fetch` for a :class:`Source` that a dataset keeps in a registry of its own
    (FSDD's 3,000 recordings, :mod:`transformer.data.speech.fsdd`): same order, checks and errors."""
    relpath = src.relpath
    dest = Path(cache_dir) / relpath

    if dest.is_file():
        actual = sha256_file(dest)
        if actual == src.sha256:
            return dest
        log.warning("cached %s has sha256 %s, expected %s: fetching it again", dest, actual, src.sha256)
        dest.unlink()

    root = resolve_mirror_root(mirror_root)
    if root is not None and not root.is_dir():
        # A mistyped root must not turn into a silent download (or an offline traceback).
        origin = "data.mirror_root" if mirror_root is not None else f"${MIRROR_ENV}"
        raise FileNotFoundError(f"{origin}={root}: no such folder (the dataset mirror root)")
    if root is not None and (root / relpath).is_file():
        mirrored = root / relpath
        with open(mirrored, "rb") as f:
            _atomic_copy(f, dest, src.sha256, f"{mirrored} (mirror of {src.url})")
        log.info("copied %s from mirror %s", relpath, root)
        return dest

    base = base_url if base_url is not None else os.environ.get(BASE_URL_ENV)
    url = f"{base.rstrip('/')}/{relpath}" if base else src.url
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            _atomic_copy(resp, dest, src.sha256, url, int(length) if length is not None else None)
    except (ChecksumError, DownloadError):
        raise
    except OSError as e:  # URLError, HTTPError, connection reset, timeouts
        where = f"{relpath} is not in the mirror {root}, and the " if root is not None else "the "
        raise DownloadError(f"{where}download of {url} failed: {e}") from e
    return dest


def pinned_sources(listing: Path, url: str) -> dict[str, Source]:
    """The files a ``sha256sum``-style listing names (``<sha256> <folder>/<file>`` a line), keyed by
    relative path, each fetched from ``url`` + its path below the listing's folder."""
    sources = {}
    for line in listing.read_text(encoding="utf-8").splitlines():
        sha, rel = line.split()
        sources[rel] = Source(rel, url + rel.split("/", 1)[1], sha)
    return sources


def source_checksums(relpaths: list[str] | tuple[str, ...]) -> list[str]:
    """Registry sha256 of each path (used in cache keys)."""
    return [DATASETS[r].sha256 for r in relpaths]

