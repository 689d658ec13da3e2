#!/usr/bin/env python3
"""Writes the model tests' fixtures from the reference implementations (run once; the outputs are committed).

  python3 -m venv build/venv && build/venv/bin/pip install tokenizers          # for --tokenizer
  build/venv/bin/pip install sentence-transformers                              # for --embeddings
  build/venv/bin/python tests/models/make_fixtures.py --model build/models/all-MiniLM-L6-v2 --tokenizer --embeddings --calibration

tokenizer_ids.jsonl: {"text": ..., "ids": [...]} per line, from HF `tokenizers` with truncation at 256, for
>= 5,000 lines of Debian's fortunes plus hand-made hard cases.
embeddings.jsonl: {"text": ..., "embedding": [...]} per line, from sentence-transformers, for >= 200 lines,
some over 256 tokens. The lines are fortunes drawn with a fixed seed, disjoint from the calibration lines
(the first half of the shuffled corpus is calibration, see corpus_lines).
"""
import argparse
import glob
import json
import os
import random

FORTUNES = "/usr/share/games/fortunes"


def corpus_lines():
    """Every distinct non-empty line of the fortunes files, in a fixed shuffled order."""
    lines = set()
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.strip() and line.strip() != "%":
                    lines.add(line)
    out = sorted(lines)
    random.Random(20).shuffle(out)
    return out


def fortunes():
    """Whole fortunes (the lines between % separators, joined by spaces)."""
    out = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for block in f.read().split("\n%\n"):
                text = " ".join(l.strip() for l in block.splitlines() if l.strip())
                if text:
                    out.append(text)
    random.Random(21).shuffle(out)
    return out


HARD = [
    "",
    "   ",
    "\t \n\r  \u3000\u00a0",
    "Héllo Wörld! Ça va? Ñandú, Ångström, façade, naïve, coöperate",
    "ÀÁÂÃÄÅ àáâãäå ÈÉÊË èéêë Ǆ ǅ ǆ ﬁ ﬂ Ⅻ ½ ² ①",
    "İstanbul ΣΊΣΥΦΟΣ ὈΔΥΣΣΕΎΣ Straße MASSE",
    "日本語のテキストと中文文本，한국어 텍스트도",
    "混合mixed文本text㐀𠀀𪜀𫝀𫠠𬺰豈",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇵🇱 ❤️ ✨",
    "zero\u200bwidth\u200cjoin\u200dand\ufeffbom\u2060word",
    "control\x01\x02\x07\x1b[31mred\x1b[0m\x7f\x85end",
    "soft\u00adhyphen and bidi \u202eoverride\u202c and \ufffd replacement",
    "a" * 99,
    "b" * 100,
    "c" * 101,
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "don't can't won't it's \"quoted\" 'single' (paren) [bracket] {brace} <angle>",
    "$100 + 5% = ^caret^ `tick` |pipe| ~tilde~ @at #hash &amp *star* _under_ \\back/",
    "e-mail: someone@example.com, url: https://example.org/a?b=c&d=e#f",
    "numbers 3.14159 1,000,000 2nd 42nd 1e-12 0x7fff",
    "…—–‘’“”«»¿¡§¶†‡•",
    "Москва, Київ, Warszawa, Zürich, København, Reykjavík, İzmir",
    "عربي עברית हिन्दी ไทย ქართული",
    "a\u0301 e\u0308 n\u0303 (combining marks)",
    "\u0000null\u0000inside",
    " ".join(["word"] * 300),
    " ".join(["tokenization"] * 150),
    "x" * 5000,
    "ab" * 60 + " " + "hello " * 10,
]


def write_tokenizer(model, out):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    lines = HARD + corpus_lines()[:6000]
    with open(out, "w", encoding="utf-8") as f:
        for text in lines:
            ids = tok.encode(text).ids
            f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")
    print(f"{out}: {len(lines)} lines")


def embedding_lines():
    """>= 200 test lines: 180 whole fortunes, 24 hard cases, 16 long ones (several fortunes joined)."""
    f = fortunes()
    test = f[len(f) // 2 :]
    long_lines = [" ".join(test[200 + 12 * i : 212 + 12 * i]) for i in range(16)]
    return test[:180] + HARD[:24] + long_lines


def write_calibration(out):
    """SmoothQuant's calibration set: 256 whole fortunes from the first half, disjoint from embedding_lines()."""
    f = fortunes()
    calib = [t for t in f[: len(f) // 2] if t not in set(embedding_lines())][:256]
    with open(out, "w", encoding="utf-8") as fh:
        for text in calib:
            fh.write(text.replace("\n", " ") + "\n")
    print(f"{out}: {len(calib)} lines")


def write_embeddings(model, out):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model, device="cpu")
    lines = embedding_lines()
    emb = st.encode(lines, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    n_long = sum(1 for t in lines if len(st.tokenizer(t)["input_ids"]) > 256)
    with open(out, "w", encoding="utf-8") as f:
        for text, e in zip(lines, emb):
            f.write(json.dumps({"text": text, "embedding": [float(f"{x:.7g}") for x in e]}, ensure_ascii=False) + "\n")
    print(f"{out}: {len(lines)} lines, {n_long} over 256 tokens")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", action="store_true")
    ap.add_argument("--embeddings", action="store_true")
    ap.add_argument("--calibration", action="store_true", help="needs no Python package")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.tokenizer:
        write_tokenizer(a.model, os.path.join(a.out, "tokenizer_ids.jsonl"))
    if a.calibration:
        write_calibration(os.path.join(a.out, "calibration.txt"))
    if a.embeddings:
        write_embeddings(a.model, os.path.join(a.out, "embeddings.jsonl"))
