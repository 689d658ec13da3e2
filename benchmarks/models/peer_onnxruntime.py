#!/usr/bin/env python3
"""onnxruntime peer for frugal_embed: the same BERT sentence encoder (all-MiniLM-L6-v2 layout), as an
ONNX graph built from model.safetensors with the onnx helper API and numpy (no torch), run by
onnxruntime in fp32 and in its dynamic int8 quantization.

    peer_onnxruntime.py build --model DIR --out DIR [--fixture embeddings.jsonl]
        writes DIR/ort_fp32.onnx and DIR/ort_int8.onnx (onnxruntime.quantization.quantize_dynamic),
        checks the fp32 graph against the fixture's sentence-transformers embeddings (cosine >= 0.9999)
        and writes DIR/ort_build.json
    peer_onnxruntime.py run --model DIR --onnx FILE --input FILE --output FILE --threads N [--batch 32]
        [--reps 3] [--order length|input] [--json FILE]
        embeds one sentence per input line (the same input and output format as frugal_embed), timing a
        warm-up pass and then --reps passes over all lines (tokenization included); batches are padded
        to their longest sentence, and formed longest-first as sentence-transformers does (--order
        length) or in input order; prints and writes a JSON of sentences/s (best and median), padding
        fraction, weight MB and peak RSS

Benchmark-only: needs onnx, onnxruntime, numpy and tokenizers (pip, see benchmarks/models/README.md).
"""
import argparse
import json
import os
import resource
import statistics
import struct
import sys
import time

# One thread for the tokenizer too, so that "1 thread" means one core for the whole pipeline. Must be
# set before tokenizers is imported.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

MAX_TOKENS = 256
OPSET = 17  # LayerNormalization is a standard op from 17 on


# ---------------------------------------------------------------------------------------------------
# safetensors, read with numpy only: 8-byte little-endian header length, a JSON header, the data.
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
        out[name] = arr.astype(np.float32) if arr.dtype == np.float16 else arr.copy()
    return out


# ---------------------------------------------------------------------------------------------------
# The graph.
def build_graph(model_dir):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    hidden, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    head_dim = hidden // heads
    if cfg.get("hidden_act", "gelu") != "gelu":
        sys.exit(f"peer: hidden_act {cfg.get('hidden_act')} is not the exact-erf gelu this graph builds")
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    pre = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op, ins, outs=None, **attrs):
        outs = outs or [f"{op.lower()}_{len(nodes)}"]
        nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def linear(x, key, tag):
        # Linear weights are named "lin.*" so that their bytes (and, after quantization, those of their
        # int8 copies, scales and zero points, which keep the prefix) can be counted.
        wt = init(f"lin.{tag}.weight", w[key + ".weight"].T)  # (K, N): x (.., K) @ W^T
        b = init(f"lin.{tag}.bias", w[key + ".bias"])
        return node("Add", [node("MatMul", [x, wt]), b])

    def layer_norm(x, key):
        g = init(key + ".ln.g", w[key + ".weight"])
        b = init(key + ".ln.b", w[key + ".bias"])
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)

    c_zero_1d = init("c.zero_1d", np.array([0], np.int64))
    c_ax0 = init("c.ax0", np.array([0], np.int64))
    c_one_f = init("c.one_f", np.array(1.0, np.float32))
    c_half = init("c.half", np.array(0.5, np.float32))
    c_sqrt2 = init("c.sqrt2", np.array(np.sqrt(2.0), np.float32))
    c_sqrt_d = init("c.sqrt_d", np.array(np.sqrt(head_dim), np.float32))
    c_neg = init("c.neg", np.array(-10000.0, np.float32))
    c_ax1 = init("c.ax1", np.array([1], np.int64))
    c_ax2 = init("c.ax2", np.array([2], np.int64))
    c_ax12 = init("c.ax12", np.array([1, 2], np.int64))
    c_tiny = init("c.tiny", np.array(1e-9, np.float32))
    c_eps_norm = init("c.eps_norm", np.array(1e-12, np.float32))
    c_split = init("c.split_shape", np.array([0, 0, heads, head_dim], np.int64))
    c_merge = init("c.merge_shape", np.array([0, 0, hidden], np.int64))

    # Embeddings: word + position + token type 0, then LayerNorm.
    e = pre + "embeddings."
    word = init("emb.word", w[e + "word_embeddings.weight"])
    pos_tab = init("emb.pos", w[e + "position_embeddings.weight"])
    tok0 = init("emb.type0", w[e + "token_type_embeddings.weight"][0])
    seq = node("Shape", ["input_ids"], start=1, end=2)  # [S], 1-D
    positions = node("Slice", [pos_tab, c_zero_1d, seq, c_ax0])  # rows 0 .. S-1 of the position table
    x = node("Add", [node("Add", [node("Gather", [word, "input_ids"], axis=0), positions]), tok0])
    x = layer_norm(x, e + "LayerNorm")

    # Attention mask: 0 where attended, -10000 at padding, broadcast to (B, 1, 1, S).
    mask_f = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask_bias = node("Unsqueeze", [node("Mul", [node("Sub", [c_one_f, mask_f]), c_neg]), c_ax12])

    for i in range(layers):
        p = f"{pre}encoder.layer.{i}."
        t = f"l{i}"
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query", t + ".q"), c_split])],
                 perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key", t + ".k"), c_split])],
                 perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value", t + ".v"), c_split])],
                 perm=[0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, k]), c_sqrt_d]), mask_bias])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), c_merge])
        attn = linear(ctx, p + "attention.output.dense", t + ".o")
        x = layer_norm(node("Add", [attn, x]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense", t + ".ffn_in")
        # Exact GELU: h * 0.5 * (1 + erf(h / sqrt 2)), the pattern onnxruntime fuses into its Gelu op.
        h = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, c_sqrt2])]), c_one_f])]), c_half])
        o = linear(h, p + "output.dense", t + ".ffn_out")
        x = layer_norm(node("Add", [o, x]), p + "output.LayerNorm")

    # Mean pooling over attended tokens, then L2 normalisation.
    m3 = node("Unsqueeze", [mask_f, c_ax2])
    summed = node("ReduceSum", [node("Mul", [x, m3]), c_ax1], keepdims=0)
    count = node("Max", [node("ReduceSum", [m3, c_ax1], keepdims=0), c_tiny])
    mean = node("Div", [summed, count])
    norm = node("Max", [node("ReduceL2", [mean], axes=[1], keepdims=1), c_eps_norm])
    node("Div", [mean, norm], ["embedding"])

    graph = helper.make_graph(
        nodes, "minilm_sentence_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="frugal benchmarks/models/peer_onnxruntime.py")
    model.ir_version = 8  # onnxruntime reads IR 8 with opset 17 on every release that has LayerNormalization
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------------------------------
def tokenizer_for(model_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    # tokenizer.json ships truncation and fixed padding at 128; sentence-transformers runs MiniLM at 256
    # and pads per batch to its longest sequence.
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def batches(tok, lines, batch):
    for i in range(0, len(lines), batch):
        enc = tok.encode_batch(lines[i:i + batch])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        yield ids, mask


def session(path, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def length_order(lines):
    """sentence-transformers' encode() order: longest text (in characters) first, so that a batch holds
    sentences of similar length and pads little."""
    return sorted(range(len(lines)), key=lambda i: -len(lines[i]))


def embed_all(sess, tok, lines, batch, order="input"):
    idx = length_order(lines) if order == "length" else list(range(len(lines)))
    out = []
    for ids, mask in batches(tok, [lines[i] for i in idx], batch):
        out.append(sess.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0])
    emb = np.concatenate(out)
    res = np.empty_like(emb)
    res[idx] = emb  # back to input order
    return res


def weight_bytes(path):
    import onnx

    m = onnx.load(path)
    lin = other = 0
    for t in m.graph.initializer:
        n = onnx.numpy_helper.to_array(t).nbytes
        if t.name.startswith("lin."):
            lin += n
        else:
            other += n
    return lin, other


def op_counts(path):
    import onnx

    counts = {}
    for n in onnx.load(path).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def read_fixture(path):
    texts, embs = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            texts.append(d["text"])
            embs.append(d["embedding"])
    return texts, np.array(embs, dtype=np.float32)


def cosines(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


def cmd_build(a):
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    os.makedirs(a.out, exist_ok=True)
    fp32 = os.path.join(a.out, "ort_fp32.onnx")
    int8 = os.path.join(a.out, "ort_int8.onnx")
    onnx.save(build_graph(a.model), fp32)
    report = {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "opset": OPSET}

    tok = tokenizer_for(a.model)
    if a.fixture:
        texts, ref = read_fixture(a.fixture)
        got = embed_all(session(fp32, 2), tok, texts, 32)
        c = cosines(got, ref)
        report["fixture"] = {"sentences": len(texts), "cosine_min": float(c.min()), "cosine_mean": float(c.mean()),
                             "worst_line": int(c.argmin())}
        print(f"peer: ONNX fp32 vs sentence-transformers over {len(texts)} fixture lines: "
              f"min cosine {c.min():.7f}, mean {c.mean():.7f} (line {c.argmin()} is the worst)", file=sys.stderr)
        if c.min() < 0.9999:
            sys.exit("peer: the fp32 ONNX graph does not match the fixture (min cosine < 0.9999)")

    # Dynamic int8 quantization as a user would run it: int8 weights, activations quantized per call.
    # Only MatMul is quantized (frugal keeps embeddings, LayerNorm and attention in fp32 too); the two
    # attention MatMuls have no constant weight, and quantize_dynamic leaves such MatMuls in fp32.
    settings = {"weight_type": "QInt8", "per_channel": True, "reduce_range": False, "op_types_to_quantize": ["MatMul"]}
    try:
        quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
                         op_types_to_quantize=["MatMul"])
        session(int8, 1)  # loads: per-channel MatMulInteger is not supported on every release
    except Exception as e:  # noqa: BLE001 - fall back, and say so
        print(f"peer: per_channel=True failed ({type(e).__name__}: {e}); using per-tensor", file=sys.stderr)
        settings["per_channel"] = False
        settings["per_channel_error"] = f"{type(e).__name__}: {e}"
        quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=False, reduce_range=False,
                         op_types_to_quantize=["MatMul"])
    report["int8_settings"] = settings
    report["int8_ops"] = op_counts(int8)
    report["fp32_ops"] = op_counts(fp32)
    for name, path in (("fp32", fp32), ("int8", int8)):
        lin, other = weight_bytes(path)
        report[f"{name}_linear_MB"] = lin / 1e6
        report[f"{name}_other_MB"] = other / 1e6
        report[f"{name}_file_MB"] = os.path.getsize(path) / 1e6
    with open(os.path.join(a.out, "ort_build.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


def cmd_run(a):
    with open(a.input, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tok = tokenizer_for(a.model)
    real = slots = 0
    idx = length_order(lines) if a.order == "length" else list(range(len(lines)))
    for ids, mask in batches(tok, [lines[i] for i in idx], a.batch):
        real += int(mask.sum())
        slots += mask.size
    sess = session(a.onnx, a.threads)
    emb = embed_all(sess, tok, lines, a.batch, a.order)  # warm-up, and the embeddings written
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        embed_all(sess, tok, lines, a.batch, a.order)
        times.append(time.perf_counter() - t0)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # before onnx.load below
    with open(a.output, "w") as f:
        for e in emb:
            f.write("[" + ",".join(f"{v:.7g}" for v in e) + "]\n")
    lin, other = weight_bytes(a.onnx)
    res = {"onnx": os.path.basename(a.onnx), "order": a.order, "threads": a.threads, "batch": a.batch,
           "sentences": len(lines),
           "tokens": real, "padded_slots": slots, "padding_fraction": 1 - real / slots, "reps": a.reps,
           "seconds": times, "sentences_per_s_median": len(lines) / statistics.median(times),
           "sentences_per_s_best": len(lines) / min(times), "linear_MB": lin / 1e6, "other_MB": other / 1e6,
           "peak_rss_MB": peak_rss}
    print(f"peer: {res['onnx']}, {len(lines)} sentences in {a.order} order, batch {a.batch}, {a.threads} threads: "
          f"{res['sentences_per_s_best']:.1f} sentences/s (best of {a.reps}, median "
          f"{res['sentences_per_s_median']:.1f}); padding {res['padding_fraction']:.1%} of {slots} slots; "
          f"linear weights {res['linear_MB']:.2f} MB; peak RSS {res['peak_rss_MB']:.1f} MB", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--model", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--fixture")
    r = sub.add_parser("run")
    r.add_argument("--model", required=True, help="the model directory (for tokenizer.json)")
    r.add_argument("--onnx", required=True)
    r.add_argument("--input", required=True)
    r.add_argument("--output", required=True)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--order", choices=["length", "input"], default="length",
                   help="batch sentences longest first, as sentence-transformers does (default), or in input order")
    r.add_argument("--json")
    a = ap.parse_args()
    cmd_build(a) if a.cmd == "build" else cmd_run(a)


if __name__ == "__main__":
    main()
