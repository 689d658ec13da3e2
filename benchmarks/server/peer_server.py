#!/usr/bin/env python3
"""The peer of frugal_server: what many users deploy instead. Python's standard-library HTTP server
(ThreadingHTTPServer, one thread per connection, HTTP/1.1 keep-alive) around onnxruntime, serving the
same model (all-MiniLM-L6-v2, the ONNX graph that benchmarks/models/peer_onnxruntime.py builds from
model.safetensors without torch) in the same OpenAI shape:

    POST /v1/embeddings   {"model": "...", "input": "text" | ["text", ...]}
                          -> {"object": "list", "data": [{"object": "embedding", "index": i,
                              "embedding": [...]}], "model": "...", "usage": {"prompt_tokens": n, ...}}
    GET  /healthz, /readyz, /metrics (peer_process_resident_bytes, peer_requests_total)

Each request is tokenized and run by one shared onnxruntime InferenceSession (its run() is thread
safe), padded to the request's longest input: no cross-request batching, no cache, as a plain
deployment does it.

    peer_server.py --model DIR [--port 0] [--precision fp32|int8] [--threads N] [--tcp-nodelay] [--onnx-dir DIR]

prints "listening on 127.0.0.1:PORT" on stdout once the model is loaded and warm; SIGTERM stops it.
Benchmark-only: needs onnx, onnxruntime, numpy and tokenizers (the venv of benchmarks/models/README.md).
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import numpy as np  # noqa: E402

import peer_onnxruntime as peer  # noqa: E402  (build_graph, tokenizer_for, session)

MAX_BODY = 1 << 20
MAX_INPUTS = 256


def build_onnx(model_dir, out_dir, precision):
    """Builds (once) and returns the path of the fp32 or dynamic-int8 ONNX graph."""
    import onnx

    os.makedirs(out_dir, exist_ok=True)
    fp32 = os.path.join(out_dir, "ort_fp32.onnx")
    if not os.path.exists(fp32):
        onnx.save(peer.build_graph(model_dir), fp32)
    if precision == "fp32":
        return fp32
    int8 = os.path.join(out_dir, "ort_int8.onnx")
    if not os.path.exists(int8):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
                         op_types_to_quantize=["MatMul"])
    return int8


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Peer:
    def __init__(self, a):
        self.model_name = a.model_name
        self.tok = peer.tokenizer_for(a.model)
        self.sess = peer.session(build_onnx(a.model, a.onnx_dir, a.precision), a.threads)
        self.lock = threading.Lock()
        self.counts = {"ok": 0, "error": 0}
        self.embed(["warm up the session"])

    def embed(self, texts):
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        out = self.sess.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        return out, int(mask.sum())

    def count(self, what):
        with self.lock:
            self.counts[what] += 1


def make_handler(p, nodelay=False):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects
        disable_nagle_algorithm = nodelay  # TCP_NODELAY; the stdlib's default is off
        server_version = "peer"

        def log_message(self, *args):  # no per-request logging
            pass

        def send(self, status, obj, ctype="application/json"):
            body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def fail(self, status, msg, param=None, kind="invalid_request_error"):
            p.count("error")
            self.send(status, {"error": {"message": msg, "type": kind, "param": param, "code": None}})

        def do_GET(self):
            if self.path in ("/healthz", "/readyz"):
                return self.send(200, b"ok\n", "text/plain")
            if self.path == "/metrics":
                with p.lock:
                    c = dict(p.counts)
                text = (f"peer_process_resident_bytes {rss_bytes()}\n"
                        f'peer_requests_total{{outcome="ok"}} {c["ok"]}\n'
                        f'peer_requests_total{{outcome="error"}} {c["error"]}\n')
                return self.send(200, text.encode(), "text/plain; version=0.0.4")
            self.fail(404, f"no route {self.path}")

        def do_POST(self):
            if self.path != "/v1/embeddings":
                return self.fail(404, f"no route {self.path}")
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                self.close_connection = True
                return self.fail(413, "the body is over the limit")
            try:
                body = json.loads(self.rfile.read(n))
            except (ValueError, UnicodeDecodeError):
                return self.fail(400, "the body is not valid JSON")
            if not isinstance(body, dict):
                return self.fail(400, "the body must be a JSON object")
            if body.get("model", p.model_name) != p.model_name:
                return self.fail(404, f"unknown model {body.get('model')!r}", "model", "not_found_error")
            inp = body.get("input")
            texts = [inp] if isinstance(inp, str) else inp
            if (not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS
                    or not all(isinstance(t, str) and t for t in texts)):
                return self.fail(400, "input must be a non-empty string or array of non-empty strings", "input")
            try:
                emb, tokens = p.embed(texts)
            except Exception as e:  # noqa: BLE001 - answer, do not drop the connection
                return self.fail(500, f"the model failed: {e}", None, "server_error")
            p.count("ok")
            self.send(200, {"object": "list",
                            "data": [{"object": "embedding", "index": i, "embedding": emb[i].tolist()}
                                     for i in range(len(texts))],
                            "model": p.model_name,
                            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog (socketserver's default is 5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the model directory (model.safetensors, tokenizer.json)")
    ap.add_argument("--model-name", default="all-MiniLM-L6-v2")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="onnxruntime intra-op threads per run (default: the cores)")
    ap.add_argument("--tcp-nodelay", action="store_true",
                    help="set TCP_NODELAY on each connection (the stdlib leaves Nagle on: headers and body "
                         "are two writes, and the body then waits for the client's delayed ACK)")
    ap.add_argument("--onnx-dir", default=os.path.join("build", "peer-server"),
                    help="where the ONNX graphs are built once and reused")
    a = ap.parse_args()
    p = Peer(a)
    srv = Server((a.host, a.port), make_handler(p, a.tcp_nodelay))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start())
    print(f"listening on {a.host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()
    srv.server_close()
    # Daemon threads may still be inside onnxruntime; a normal interpreter exit then aborts in its
    # thread pool's teardown ("terminate called without an active exception"). Leave at once instead.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
