"""Prompt embeddings and their online clustering: the shard keys of `semantic-shard --shard-key embedding`.

Embedders (`load_embedder(spec)`; each is a callable `texts -> float32 (n, dim)` with unit rows,
a zero row for a text it cannot embed, and a `name`):

- ``hashed`` (default; ``hashed:DIM`` for another width): needs no model and no package. The
  text is lower-cased with its whitespace collapsed and padded by one space; every byte
  n-gram of its UTF-8 (n = 3, 4, 5: character n-grams for ASCII text) is hashed (FNV-1a
  over its bytes, then Fibonacci hashing with `traces.hashing.GOLDEN`) to one of `dim` (1024)
  buckets with a sign from another bit of the hash; the counts are L2-normalised. Two texts'
  cosine similarity is then about the share of n-grams they have in common; the same text
  gives the same vector on every machine and in every process (no `hash()` salt).
- ``sentence-transformers:PATH`` and ``model2vec:PATH``: the model in the local folder PATH,
  through the package when it is installed. Nothing is downloaded: HF_HUB_OFFLINE=1 and
  TRANSFORMERS_OFFLINE=1 are set and the model is opened with local files only. A package
  that is not installed, a folder that does not exist or a model that does not load is one
  `EmbedderError` line (exit status 2).

Online clustering (`OnlineClusters`, `cluster_texts`): requests in arrival order; each joins
the cluster whose centroid is most similar (cosine, the first such cluster on a tie) when that
similarity is at least `threshold` (0.65), else opens a new cluster. A centroid is the
normalised running mean of its members. A request with no text (or a zero embedding) gets
label -1. The nearest-centroid search is FAISS (`IndexFlatIP`, float32) when `faiss` is
installed and numpy (float64) otherwise; ``search="numpy"`` or ``"faiss"`` chooses.
"""
from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from sitsprof.common.jit import njit

from ..errors import EmbedderError
from ..traces.hashing import GOLDEN

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_THRESHOLD",
    "EMBEDDER_HELP",
    "NGRAM_MAX",
    "NGRAM_MIN",
    "SEARCHES",
    "Clustering",
    "HashedEmbedder",
    "OnlineClusters",
    "cluster_texts",
    "embedder_name",
    "faiss_available",
    "load_embedder",
    "normalise_text",
]

DEFAULT_THRESHOLD = 0.65
DEFAULT_DIM = 1024
NGRAM_MIN, NGRAM_MAX = 3, 5
SEARCHES = ("auto", "numpy", "faiss")
EMBEDDER_HELP = (
    "hashed (built in), hashed:DIM, sentence-transformers:PATH or model2vec:PATH (PATH: a local model folder)")

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True)
def _hash_ngrams(data, starts, dim, n_min, n_max, out):
    """out[t] += +-1 in bucket h(g) for every byte n-gram g (n_min <= n <= n_max) of text t =
    data[starts[t]:starts[t+1]]; h is FNV-1a over g's bytes, xor n, times GOLDEN."""
    d = np.uint64(dim)
    for t in range(starts.shape[0] - 1):
        lo, hi = starts[t], starts[t + 1]
        for i in range(lo, hi - n_min + 1):
            h = _FNV_OFFSET
            for k in range(n_max):
                if i + k >= hi:
                    break
                h = (h ^ np.uint64(data[i + k])) * _FNV_PRIME
                if k + 1 >= n_min:
                    m = (h ^ np.uint64(k + 1)) * GOLDEN
                    bucket = (m >> np.uint64(32)) % d
                    if (m >> np.uint64(31)) & np.uint64(1):
                        out[t, bucket] += 1.0
                    else:
                        out[t, bucket] -= 1.0


def normalise_text(text: str) -> str:
    """Lower case, whitespace runs as one space, padded by a space each side."""
    return " " + " ".join(text.lower().split()) + " "


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class HashedEmbedder:
    """Hashed byte n-grams (3-5) into `dim` signed buckets, L2-normalised (module docstring)."""

    def __init__(self, dim: int = DEFAULT_DIM, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX):
        if not 16 <= int(dim) <= 65_536:
            raise EmbedderError(f"embedder hashed:{dim}: the width must be 16 to 65536 (e.g. hashed:1024)")
        self.dim, self.n_min, self.n_max = int(dim), int(n_min), int(n_max)
        self.name = "hashed" if self.dim == DEFAULT_DIM else f"hashed:{self.dim}"

    def __call__(self, texts: Sequence[str | None]) -> np.ndarray:
        encoded = [b"" if t is None else normalise_text(str(t)).encode("utf-8") for t in texts]
        starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=starts[1:])
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        out = np.zeros((len(encoded), self.dim), dtype=np.float32)
        if len(data):
            _hash_ngrams(data, starts, self.dim, self.n_min, self.n_max, out)
        return _unit_rows(out)


def _offline() -> None:
    """Nothing from a hub at run time: the Hugging Face libraries' offline switches."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _package(kind: str, module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise EmbedderError(f"embedder {kind}: the package {kind} is not installed "
                            f"(pip install {kind}, or use --embedder hashed)") from None


def _model_folder(kind: str, path: str) -> Path:
    if not path:
        raise EmbedderError(f"embedder {kind}: give the model's local folder, e.g. --embedder {kind}:/models/name")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise EmbedderError(f"embedder {kind}: model folder {path} does not exist (give a local folder holding "
                            "the model; nothing is downloaded)")
    return folder


def _load_failed(kind: str, folder: Path, exc: Exception) -> EmbedderError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return EmbedderError(f"embedder {kind}: cannot load the model in {folder}: {first}")


class _ModelEmbedder:
    """A loaded sentence-transformers or model2vec model as an embedder."""

    def __init__(self, name: str, encode: Callable):
        self.name = name
        self._encode = encode

    def __call__(self, texts: Sequence[str | None]) -> np.ndarray:
        texts = list(texts)
        present = [i for i, t in enumerate(texts) if t]
        vectors = np.asarray(self._encode([str(texts[i]) for i in present]), dtype=np.float32) if present else None
        if vectors is not None and (vectors.ndim != 2 or len(vectors) != len(present)):
            raise EmbedderError(f"embedder {self.name}: the model returned shape {vectors.shape} for "
                                f"{len(present)} texts")
        out = np.zeros((len(texts), 0 if vectors is None else vectors.shape[1]), dtype=np.float32)
        if present:
            out[present] = vectors
        return _unit_rows(out)


def _sentence_transformers(path: str) -> _ModelEmbedder:
    kind = "sentence-transformers"
    folder = _model_folder(kind, path)
    _offline()
    package = _package(kind, "sentence_transformers")
    try:
        try:
            model = package.SentenceTransformer(str(folder), local_files_only=True)
        except TypeError:  # versions without local_files_only: the offline switches hold
            model = package.SentenceTransformer(str(folder))
    except Exception as exc:  # the library's own errors vary by version: one line for all
        raise _load_failed(kind, folder, exc) from exc

    def encode(texts):
        return model.encode(texts, batch_size=64, convert_to_numpy=True, show_progress_bar=False)

    return _ModelEmbedder(f"{kind}:{path}", encode)


def _model2vec(path: str) -> _ModelEmbedder:
    kind = "model2vec"
    folder = _model_folder(kind, path)
    _offline()
    package = _package(kind, "model2vec")
    try:
        model = package.StaticModel.from_pretrained(str(folder))
    except Exception as exc:
        raise _load_failed(kind, folder, exc) from exc
    return _ModelEmbedder(f"{kind}:{path}", lambda texts: model.encode(texts))


@lru_cache(maxsize=4)
def _load(spec: str):
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "hashed":
        if not arg:
            return HashedEmbedder()
        try:
            dim = int(arg)
        except ValueError:
            raise EmbedderError(f"embedder {spec!r}: the width must be a whole number (e.g. hashed:1024)") from None
        return HashedEmbedder(dim)
    if kind in ("sentence-transformers", "sentence_transformers", "st"):
        return _sentence_transformers(arg.strip())
    if kind == "model2vec":
        return _model2vec(arg.strip())
    raise EmbedderError(f"embedder {spec!r} unknown; choose {EMBEDDER_HELP}")


def load_embedder(spec=None):
    """An embedder from `spec`: None or a spec string (module docstring), or a callable as is.
    Models are loaded once per process and spec."""
    if spec is None:
        return _load("hashed")
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise EmbedderError(f"embedder {spec!r}: give {EMBEDDER_HELP}")
    return _load(spec.strip())


def embedder_name(embedder) -> str:
    return str(getattr(embedder, "name", None) or getattr(embedder, "__name__", None) or type(embedder).__name__)


def faiss_available() -> bool:
    try:
        importlib.import_module("faiss")
    except ImportError:
        return False
    return True


class OnlineClusters:
    """Leader clustering with running-mean centroids (module docstring); `assign(vector)`
    routes one request, `assign_many(vectors)` a batch in order."""

    def __init__(self, dim: int, threshold: float = DEFAULT_THRESHOLD, search: str = "auto"):
        if not -1.0 <= float(threshold) <= 1.0:
            raise EmbedderError(f"similarity threshold {threshold} must be in [-1, 1] (cosine; default 0.65)")
        if search not in SEARCHES:
            raise EmbedderError(f"search {search!r} unknown; choose {', '.join(SEARCHES)}")
        if search == "auto":
            search = "faiss" if faiss_available() else "numpy"
        self.dim, self.threshold, self.search = int(dim), float(threshold), search
        dtype = np.float32 if search == "faiss" else np.float64
        self._sums = np.zeros((16, self.dim), dtype=np.float64)
        self._centroids = np.zeros((16, self.dim), dtype=dtype)
        self.counts = np.zeros(16, dtype=np.int64)
        self.k = 0
        self._index = None
        if search == "faiss":
            faiss = _package("faiss-cpu", "faiss")
            self._faiss = faiss
            self._index = faiss.IndexFlatIP(self.dim)

    @property
    def centroids(self) -> np.ndarray:
        return self._centroids[: self.k]

    def _grow(self) -> None:
        n = 2 * len(self.counts)
        for name in ("_sums", "_centroids"):
            old = getattr(self, name)
            new = np.zeros((n, self.dim), dtype=old.dtype)
            new[: self.k] = old[: self.k]
            setattr(self, name, new)
        self.counts = np.concatenate([self.counts, np.zeros(n - len(self.counts), dtype=np.int64)])

    def _nearest(self, v: np.ndarray) -> tuple[int, float]:
        if self._index is not None:
            sims, ids = self._index.search(v.astype(np.float32, copy=False).reshape(1, -1), 1)
            return int(ids[0, 0]), float(sims[0, 0])
        sims = self._centroids[: self.k] @ v
        best = int(np.argmax(sims))
        return best, float(sims[best])

    def _store(self, c: int, centroid: np.ndarray, new: bool) -> None:
        self._centroids[c] = centroid
        if self._index is None:
            return
        row = centroid.astype(np.float32, copy=False).reshape(1, -1)
        if new:
            self._index.add(row)
        else:  # overwrite the stored vector in place (IndexFlat keeps rows contiguous)
            xb = self._faiss.rev_swig_ptr(self._index.get_xb(), self._index.ntotal * self.dim)
            xb[c * self.dim:(c + 1) * self.dim] = row[0]

    def assign(self, vector) -> int:
        """The cluster of one embedding (opening one when none is similar enough); -1 for a zero vector."""
        v = np.asarray(vector, dtype=np.float64).reshape(-1)
        if v.shape[0] != self.dim:
            raise EmbedderError(f"embedding of width {v.shape[0]} given to clusters of width {self.dim}")
        norm = float(np.sqrt(v @ v))
        if not norm > 0:
            return -1
        v = v / norm
        if self.k:
            best, sim = self._nearest(v)
            if sim >= self.threshold:
                self._sums[best] += v
                self.counts[best] += 1
                s = self._sums[best]
                self._store(best, s / np.sqrt(s @ s), new=False)
                return best
        if self.k == len(self.counts):
            self._grow()
        c = self.k
        self._sums[c] = v
        self.counts[c] = 1
        self.k += 1
        self._store(c, v, new=True)
        return c

    def assign_many(self, vectors) -> np.ndarray:
        vectors = np.asarray(vectors)
        return np.fromiter((self.assign(v) for v in vectors), dtype=np.int64, count=len(vectors))


@dataclass
class Clustering:
    """What `cluster_texts` found: one label per text (-1: no text), and how."""

    labels: np.ndarray
    clusters: int
    embedder: str
    threshold: float
    search: str
    seconds: float

    def summary(self) -> dict:
        return {"embedder": self.embedder, "similarity": self.threshold, "search": self.search,
                "clusters": self.clusters, "texts": int((self.labels >= 0).sum()),
                "seconds": round(self.seconds, 4)}


def cluster_texts(texts: Sequence[str | None], embedder=None, threshold: float = DEFAULT_THRESHOLD,
                  search: str = "auto", batch: int = 4096) -> Clustering:
    """Embed `texts` (in batches of `batch`) and cluster them online in order."""
    start = time.perf_counter()
    embed = load_embedder(embedder)
    texts = list(texts)
    clusters = None
    labels = np.empty(len(texts), dtype=np.int64)
    for lo in range(0, len(texts), batch):
        part = texts[lo:lo + batch]
        vectors = np.asarray(embed(part))
        if vectors.ndim != 2 or len(vectors) != len(part):
            raise EmbedderError(f"embedder {embedder_name(embed)} returned shape {vectors.shape}, "
                                f"expected ({len(part)}, dim)")
        if clusters is None:
            clusters = OnlineClusters(vectors.shape[1], threshold, search)
        labels[lo:lo + len(part)] = clusters.assign_many(vectors)
    if clusters is None:
        clusters = OnlineClusters(1, threshold, "numpy")
    return Clustering(labels, clusters.k, embedder_name(embed), float(threshold), clusters.search,
                      time.perf_counter() - start)
