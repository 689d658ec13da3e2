#!/usr/bin/env python3
"""Writes smollm2_reference.json: an independent float64 reference of a Llama GGUF model (run once; committed).

  nice -n 5 python3 tests/models/make_llama_reference.py \\
      --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --bin "$(benchmarks/llm/setup_peer.sh)"   # llama.cpp's tools, for llama-tokenize and llama-perplexity

Needs only numpy and gguf (pip install numpy gguf). The weights are dequantized with gguf.quants.dequantize and
the whole forward pass runs in numpy float64: the exact model the quantized weights define, free of the rounding
of any fp32/int8 kernel. Every shape and hyper-parameter comes from the file's metadata.

llama.cpp is used only as a tokenizer (llama-tokenize: the chat prompts with special tokens parsed, and the
perplexity text) and, when --bin holds llama-perplexity, for its perplexity figures, stored under "llama_cpp" as a
comparison. The fortune prompts' ids come from smollm2_tokenizer_ids.jsonl (llama.cpp's own ids). 8 to 13 min
on 2 shared cores (the two llama-perplexity runs included).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import time

import gguf
import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTIONS = [
    "What is the capital of France?",
    "Explain in one sentence why the sky is blue.",
    "Write a haiku about autumn leaves.",
    "How many legs does a spider have?",
    "Give me three tips for learning to program.",
]
N_FORTUNE, N_GEN, N_TOP, N_FIXED = 50, 32, 32, 64


class Llama:
    """Llama forward pass over the dequantized weights of a GGUF file, float64 throughout."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")
                or k.split(".")[-1] not in ("tokens", "scores", "token_type", "merges")}
        arch = meta["general.architecture"]
        self.n_layer = meta[f"{arch}.block_count"]
        self.d = meta[f"{arch}.embedding_length"]
        self.n_ff = meta[f"{arch}.feed_forward_length"]
        self.n_head = meta[f"{arch}.attention.head_count"]
        self.n_kv = meta[f"{arch}.attention.head_count_kv"]
        self.head_dim = self.d // self.n_head
        self.n_rot = meta.get(f"{arch}.rope.dimension_count", self.head_dim)
        self.base = meta[f"{arch}.rope.freq_base"]
        self.eps = meta[f"{arch}.attention.layer_norm_rms_epsilon"]
        self.n_ctx_train = meta[f"{arch}.context_length"]
        self.bos = meta["tokenizer.ggml.bos_token_id"]
        self.eos = meta["tokenizer.ggml.eos_token_id"]
        self.add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
        self.meta = meta
        tensors = {t.name: t for t in r.tensors}

        def w(name, shape):
            t = tensors[name]
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            if a.shape != shape:
                raise ValueError(f"{name}: shape {a.shape}, metadata implies {shape}")
            return a

        d, hd, ff = self.d, self.head_dim, self.n_ff
        self.embd = w("token_embd.weight", (tensors["token_embd.weight"].shape[1], d))
        self.n_vocab = self.embd.shape[0]
        self.out = w("output.weight", self.embd.shape) if "output.weight" in tensors else self.embd
        self.out_norm = w("output_norm.weight", (d,))
        self.layers = []
        for i in range(self.n_layer):
            b = f"blk.{i}."
            self.layers.append(dict(
                attn_norm=w(b + "attn_norm.weight", (d,)), q=w(b + "attn_q.weight", (self.n_head * hd, d)),
                k=w(b + "attn_k.weight", (self.n_kv * hd, d)), v=w(b + "attn_v.weight", (self.n_kv * hd, d)),
                o=w(b + "attn_output.weight", (d, self.n_head * hd)), ffn_norm=w(b + "ffn_norm.weight", (d,)),
                gate=w(b + "ffn_gate.weight", (ff, d)), up=w(b + "ffn_up.weight", (ff, d)),
                down=w(b + "ffn_down.weight", (d, ff))))

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """llama.cpp's "normal" RoPE: adjacent pairs (x[2i], x[2i+1]) turn by pos * base^(-2i/n_rot)."""
        i = np.arange(self.n_rot // 2)
        ang = pos[:, None] * self.base ** (-2.0 * i / self.n_rot)  # (L, n_rot/2)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x = x.copy()
        x0, x1 = x[..., 0:self.n_rot:2].copy(), x[..., 1:self.n_rot:2].copy()
        x[..., 0:self.n_rot:2] = x0 * c - x1 * s
        x[..., 1:self.n_rot:2] = x0 * s + x1 * c
        return x

    def new_cache(self):
        return {"n": 0, "k": [None] * self.n_layer, "v": [None] * self.n_layer}

    def forward(self, batch):
        """batch: list of (cache, new token ids). Appends each sequence's tokens to its cache and returns the
        normed final hidden states of all new tokens, concatenated in batch order."""
        lens = [len(ids) for _, ids in batch]
        x = self.embd[np.concatenate([np.asarray(ids, dtype=np.int64) for _, ids in batch])]
        hd, grp = self.head_dim, self.n_head // self.n_kv
        for li, L in enumerate(self.layers):
            h = self.rms(x, L["attn_norm"])
            q, k, v = h @ L["q"].T, h @ L["k"].T, h @ L["v"].T
            att = np.empty_like(q)
            a = 0
            for (cache, _), n in zip(batch, lens):
                p0 = cache["n"]
                pos = np.arange(p0, p0 + n, dtype=np.float64)
                qs = self.rope(q[a:a + n].reshape(n, self.n_head, hd), pos)
                ks = self.rope(k[a:a + n].reshape(n, self.n_kv, hd), pos)
                vs = v[a:a + n].reshape(n, self.n_kv, hd)
                if cache["k"][li] is not None:
                    ks = np.concatenate([cache["k"][li], ks])
                    vs = np.concatenate([cache["v"][li], vs])
                cache["k"][li], cache["v"][li] = ks, vs
                t = ks.shape[0]
                # query head h reads kv head h // grp (ggml's broadcast, and Hugging Face's repeat_kv)
                qg = qs.reshape(n, self.n_kv, grp, hd).transpose(1, 2, 0, 3)  # (kv, grp, n, hd)
                s = np.einsum("kgnd,tkd->kgnt", qg, ks) / np.sqrt(hd)
                s = np.where(np.arange(t)[None, :] <= (p0 + np.arange(n))[:, None], s, -np.inf)
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                s /= s.sum(axis=-1, keepdims=True)
                o = np.einsum("kgnt,tkd->nkgd", s, vs)
                att[a:a + n] = o.reshape(n, self.n_head * hd)
                a += n
            x = x + att @ L["o"].T
            h = self.rms(x, L["ffn_norm"])
            g = h @ L["gate"].T
            x = x + ((g / (1.0 + np.exp(-g))) * (h @ L["up"].T)) @ L["down"].T
        for cache, n in zip((c for c, _ in batch), lens):
            cache["n"] += n
        return self.rms(x, self.out_norm)

    def logits(self, h):
        return h @ self.out.T


def logsumexp(z):
    m = z.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))[..., 0]


def tokenize(bin_dir, model, text, parse_special):
    """llama.cpp's ids for text (raw bytes through stdin, nothing added)."""
    args = [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "--stdin", "--ids", "--no-bos", "--no-escape",
            "--log-disable"] + ([] if parse_special else ["--no-parse-special"])
    out = subprocess.run(args, input=text.encode(), capture_output=True, check=True).stdout.decode()
    return json.loads(out.strip().splitlines()[-1])


def greedy(m, prompts):
    caches = [m.new_cache() for _ in prompts]
    h = m.forward(list(zip(caches, prompts)))
    last = np.cumsum([len(p) for p in prompts]) - 1
    first_logits = m.logits(h[last])
    z, ids, margins = first_logits, [[] for _ in prompts], [[] for _ in prompts]
    for step in range(N_GEN):
        top2 = np.argsort(-z, axis=-1)[:, :2]
        for j, row in enumerate(top2):
            ids[j].append(int(row[0]))
            margins[j].append(float(z[j, row[0]] - z[j, row[1]]))
        if step + 1 < N_GEN:
            z = m.logits(m.forward([(c, [i[-1]]) for c, i in zip(caches, ids)]))
    return ids, margins, first_logits


def perplexity(m, tokens, n_ctx):
    """llama-perplexity's method: chunks of n_ctx tokens, each scored on its second half."""
    first, chunks = n_ctx // 2, []
    for c in range(len(tokens) // n_ctx):
        ids = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if m.add_bos:
            ids[0] = m.bos
        z = m.logits(m.forward([(m.new_cache(), ids)])[first:n_ctx - 1])
        target = np.asarray(tokens[c * n_ctx + first + 1:(c + 1) * n_ctx])
        nll = logsumexp(z) - z[np.arange(len(target)), target]
        chunks.append({"nll": float(nll.sum()), "tokens": len(target),
                       "argmax_hits": int((z.argmax(axis=-1) == target).sum())})
    total = sum(c["nll"] for c in chunks) / sum(c["tokens"] for c in chunks)
    return {"ctx": n_ctx, "chunks": len(chunks), "perplexity": float(np.exp(total)), "per_chunk": chunks}


def llama_perplexity(bin_dir, model, text_path, n_ctx):
    exe = os.path.join(bin_dir, "llama-perplexity")
    if not os.access(exe, os.X_OK):
        return None
    run = subprocess.run([exe, "-m", model, "-f", text_path, "-c", str(n_ctx), "-t", "2"], capture_output=True,
                         text=True)
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", run.stderr)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stderr.strip().splitlines()
    return {"ctx": n_ctx, "command": f"llama-perplexity -m MODEL -f {text_path} -c {n_ctx} -t 2",
            "version": " / ".join(version[-2:]), "bin": os.path.abspath(bin_dir),
            "perplexity": float(final.group(1)) if final else None, "sd": float(final.group(2)) if final else None,
            "cumulative": [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", run.stdout)]}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_fixture(path, obj):
    """One entry of a list of objects per line: diffable, still plain JSON."""
    parts = []
    for k, v in obj.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            body = "[\n" + ",\n".join("  " + json.dumps(e) for e in v) + "\n ]"
        else:
            body = json.dumps(v)
        parts.append(f" {json.dumps(k)}: {body}")
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", required=True, help="llama.cpp's bin folder (llama-tokenize, llama-perplexity)")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--ctx", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--out", default=os.path.join(HERE, "smollm2_reference.json"))
    args = ap.parse_args()
    t0 = time.time()
    m = Llama(args.model)

    lines = [json.loads(s) for s in open(os.path.join(HERE, "smollm2_tokenizer_ids.jsonl"))]
    eligible = [e for e in lines if "text" in e and not e.get("hand") and not e.get("parse_special")
                and 4 <= len(e["ids"]) <= 64]
    fortunes = [eligible[i * len(eligible) // N_FORTUNE] for i in range(N_FORTUNE)]
    chats = [f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
             for q in QUESTIONS]
    prompts = [e["ids"] for e in fortunes] + [tokenize(args.bin, args.model, c, True) for c in chats]
    texts = [e["text"] for e in fortunes] + chats
    ids, margins, first_logits = greedy(m, prompts)
    print(f"greedy done {time.time() - t0:.0f} s", flush=True)

    fixed = [7 + 768 * i for i in range(N_FIXED)]
    logit_rows = []
    for j in [0, 1, 2, N_FORTUNE, N_FORTUNE + 1]:
        z = first_logits[j]
        top = np.argsort(-z)[:N_TOP]
        logit_rows.append({"prompt": j, "top": [[int(i), float(z[i])] for i in top],
                           "logsumexp": float(logsumexp(z)), "fixed": [float(z[i]) for i in fixed]})

    # llama-perplexity reads the file with common's -f, which drops one trailing newline, then tokenizes the whole
    # text without parsing special tokens, with BOS only if the vocabulary asks for it.
    with open(args.text, "rb") as f:
        text = f.read().decode()
    text = text[:-1] if text.endswith("\n") else text
    tokens = tokenize(args.bin, args.model, text, False)
    if m.add_bos:
        tokens = [m.bos] + tokens
    ppl = [perplexity(m, tokens, n) for n in args.ctx]
    print(f"perplexity done {time.time() - t0:.0f} s: {[round(p['perplexity'], 4) for p in ppl]}", flush=True)

    fixture = {
        "model": {"file": os.path.basename(args.model), "bytes": os.path.getsize(args.model),
                  "sha256": sha256(args.model)},
        "script": "nice -n 5 python3 tests/models/make_llama_reference.py --model "
                  f"{os.path.basename(args.model)} --bin LLAMA_CPP_BIN (numpy {np.__version__}, float64)",
        "hparams": {"n_layer": m.n_layer, "d": m.d, "n_ff": m.n_ff, "n_head": m.n_head, "n_kv": m.n_kv,
                    "n_rot": m.n_rot, "rope_base": m.base, "rms_eps": m.eps, "n_vocab": m.n_vocab,
                    "context_length": m.n_ctx_train, "bos": m.bos, "eos": m.eos, "add_bos": m.add_bos},
        "notes": "greedy: prompts 0..49 are smollm2_tokenizer_ids.jsonl's eligible lines (text, not hand-made, "
                 "4..64 ids) at index i*len/50; 50..54 are ChatML prompts tokenized by llama-tokenize with special "
                 "tokens parsed. No BOS is added (the file's add_bos_token). ids: 32 greedy steps, no early stop; "
                 "margin: top1 - top2 logit at each step. logits: at the last prompt position of prompts "
                 "0, 1, 2, 50, 51; fixed ids are 7 + 768*i, i = 0..63. perplexity: llama-perplexity's method, "
                 "nll is each chunk's float64 sum of -log p over its scored tokens (positions ctx/2 .. ctx-2 "
                 "predicting the next token); argmax_hits counts scored tokens that were the argmax.",
        "greedy": [{"text": t, "prompt_ids": p, "ids": i, "margin": [round(x, 6) for x in g]}
                   for t, p, i, g in zip(texts, prompts, ids, margins)],
        "logits": logit_rows,
        "perplexity": {"text": args.text, "sha256": sha256(args.text), "n_tokens": len(tokens),
                       "tokens": tokens, "results": ppl},
        "llama_cpp": [r for r in (llama_perplexity(args.bin, args.model, args.text, n) for n in args.ctx) if r],
    }
    write_fixture(args.out, fixture)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes) in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
