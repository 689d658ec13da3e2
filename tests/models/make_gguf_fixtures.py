#!/usr/bin/env python3
"""Writes the GGUF reader's fixtures with ggml's own Python package (run once; the outputs are committed).

  python3 -m venv build/venv-gguf && build/venv-gguf/bin/pip install gguf numpy
  build/venv-gguf/bin/python tests/models/make_gguf_fixtures.py [--model SmolLM2-135M-Instruct.Q4_1.gguf]

gguf_tiny.gguf: metadata of every value type and one tensor of each type the reader dequantizes (F32, F16,
BF16, Q8_0, Q4_0, Q4_1 quantized from random floats; Q4_K, Q5_K and Q6_K as random blocks with finite
scales). gguf_tiny.expected.json: each tensor's values as gguf.quants.dequantize gives them.
gguf_smollm2_rows.json (with --model): rows of the real file's tensors, dequantized by the same function,
for a test that reads the file itself.
"""
import argparse
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def random_k_blocks(rng, qtype, rows, cols):
    """Random bytes in the block layout, with every half-precision scale set to a finite value."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    halves = {T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}[qtype]
    for off in halves:
        scale = rng.uniform(0.001, 0.05, size=n_blocks).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, cols // block * size)


def tiny(rng):
    path = os.path.join(HERE, "gguf_tiny.gguf")
    w = gguf.GGUFWriter(path, arch="tiny")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", -1.5e300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo, 世界 🙂")
    w.add_array("test.strings", ["a", "", "ü"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.nested", [[1, 2], [3]])
    expected = {}
    for name, qtype, rows, cols in [("f32", T.F32, 2, 8), ("f16", T.F16, 3, 16), ("bf16", T.BF16, 2, 8),
                                    ("q8_0", T.Q8_0, 2, 64), ("q4_0", T.Q4_0, 2, 64), ("q4_1", T.Q4_1, 3, 64),
                                    ("q4_k", T.Q4_K, 2, 256), ("q5_k", T.Q5_K, 2, 512), ("q6_k", T.Q6_K, 2, 256)]:
        if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
            raw = random_k_blocks(rng, qtype, rows, cols)
        else:
            x = rng.standard_normal((rows, cols)).astype(np.float32)
            raw = x if qtype == T.F32 else gguf.quants.quantize(x, qtype)
        w.add_tensor("t." + name, raw, raw_dtype=qtype)
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        expected["t." + name] = {"type": qtype.name, "dims": [cols, rows],
                                 "values": [float(v) for v in values.reshape(-1)]}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(HERE, "gguf_tiny.expected.json"), "w") as f:
        json.dump(expected, f)
    print("wrote", path)


def model_rows(model):
    r = gguf.GGUFReader(model)
    out = {}
    for t in r.tensors:
        if t.name not in ("token_embd.weight", "blk.0.ffn_down.weight", "blk.29.attn_q.weight",
                          "output_norm.weight"):
            continue
        block, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
        cols = int(t.shape[0])
        data = np.asarray(t.data).reshape(-1)
        n_rows = int(np.prod([int(d) for d in t.shape])) // cols
        picks = sorted({0, min(1, n_rows - 1), n_rows - 1})
        rows = {}
        for i in picks:
            if t.tensor_type == T.F32:
                row = data[i * cols:(i + 1) * cols]
            else:
                row_bytes = cols // block * size
                raw = np.asarray(t.data).reshape(-1).view(np.uint8)[i * row_bytes:(i + 1) * row_bytes]
                row = gguf.quants.dequantize(raw.reshape(1, -1), t.tensor_type).reshape(-1)
            rows[str(i)] = [float(v) for v in np.asarray(row, dtype=np.float32)]
        out[t.name] = {"type": t.tensor_type.name, "dims": [int(d) for d in t.shape], "rows": rows}
    with open(os.path.join(HERE, "gguf_smollm2_rows.json"), "w") as f:
        json.dump(out, f)
    print("wrote rows of", sorted(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="SmolLM2-135M-Instruct.Q4_1.gguf, for gguf_smollm2_rows.json")
    args = ap.parse_args()
    tiny(np.random.default_rng(44))
    if args.model:
        model_rows(args.model)


if __name__ == "__main__":
    main()
