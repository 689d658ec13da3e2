#!/usr/bin/env python3
"""Every key of the demo's configs, set to an invalid value, is refused by its full path.

For each config given (examples/demo/config.json, config_minilm.json, config_mlp.json) this writes a
hermetic base copy (out_dir, the model, corpus and text paths pointed at stand-ins in a temporary
directory), checks that `frugal_demo --check-config` accepts it, then, for every key and array entry in it,
writes copies with that value made invalid: a wrong type, out of range, empty, a directory where a file is
expected (or a file where a directory is), and a few values the library itself would refuse (a price of 0,
a price the money parser cannot read, a name with a control character). Each copy must make
`frugal_demo --check-config` exit non-zero with stderr naming the key's full path (e.g. gpu.hourly_usd,
ladder[2].precision) and the copy's file. It also checks that a config path that is a directory is said to
be one. Standard library only.

usage: config_keys.py FRUGAL_DEMO CONFIG.json [CONFIG.json ...]
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

# Strings that may be empty: prose, and model.path (empty: the default from the environment).
MAY_BE_EMPTY = re.compile(r"(^|\.)why$|^model\.path$")
ENUMS = {"model.kind", "device", "policy", "precision", "kind"}
PRICES = {"gpu.hourly_usd"}
LEDGER_NAMES = {"model.name"}


def path_str(parts):
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + p)
    return out


def leaf_name(parts):
    return next((p for p in reversed(parts) if isinstance(p, str)), "")


def set_at(doc, parts, value):
    d = copy.deepcopy(doc)
    node = d
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value
    return d


def walk(value, parts=()):
    """Every value below the root, parents first, with its path."""
    if parts:
        yield parts, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, parts + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk(v, parts + (i,))


class stand_ins:
    """The files and directories a hermetic config points at (none of them is read for real)."""

    def __init__(self, root):
        self.root = root
        self.fortunes = os.path.join(root, "fortunes")
        os.makedirs(self.fortunes)
        with open(os.path.join(self.fortunes, "demo"), "w") as f:
            f.write("A short saying.\n%\nAnother short saying.\n%\n")
        self.text = os.path.join(root, "text.txt")
        with open(self.text, "w") as f:
            f.write("Some text to measure.\n")
        self.gguf = os.path.join(root, "model.gguf")
        with open(self.gguf, "wb") as f:
            f.write(b"GGUF" + bytes(28))
        self.minilm = os.path.join(root, "minilm")
        os.makedirs(self.minilm)
        for name in ("config.json", "vocab.txt", "model.safetensors"):
            open(os.path.join(self.minilm, name), "w").close()
        self.a_dir = os.path.join(root, "a_directory")
        os.makedirs(self.a_dir)
        self.a_file = os.path.join(root, "a_file")
        with open(self.a_file, "w") as f:
            f.write("x")

    def hermetic(self, doc, out_dir):
        d = copy.deepcopy(doc)
        d["out_dir"] = out_dir
        model = d.setdefault("model", {})
        kind = model.get("kind", "mlp")
        if kind == "smollm2":
            model["path"] = self.gguf
            d.setdefault("traffic", {})["corpus"] = self.fortunes
            d.setdefault("accuracy", {})["text"] = self.text
        elif kind == "minilm":
            model["path"] = self.minilm
            model["calibration"] = self.text
            d.setdefault("traffic", {})["corpus"] = self.fortunes
        return d

    # Keys whose value names a file (a directory there is an error) or a directory (a file is).
    def path_values(self, key, kind):
        files = {"accuracy.text", "model.calibration"} | ({"model.path"} if kind == "smollm2" else set())
        dirs = {"traffic.corpus"} | ({"model.path"} if kind == "minilm" else set())
        if key in files:
            return [self.a_dir, os.path.join(self.root, "missing.txt")]
        if key in dirs:
            return [self.a_file, os.path.join(self.root, "missing")]
        if key == "out_dir":
            return [os.path.join(self.a_file, "out")]
        return []


def invalid_values(parts, value, kind, si):
    """(what, value) pairs, each invalid for the key at `parts`."""
    key, leaf = path_str(parts), leaf_name(parts)
    out = []
    if isinstance(value, dict):
        out.append(("wrong type", 5))
    elif isinstance(value, list):
        out += [("wrong type", "x"), ("empty", [])]
    elif isinstance(value, bool):
        out.append(("wrong type", "yes"))
    elif isinstance(value, (int, float)):
        out += [("wrong type", "abc"), ("below range", -1), ("above range", 1e30)]
    elif isinstance(value, str):
        out.append(("wrong type", 12345))
        if not MAY_BE_EMPTY.search(key):
            out.append(("empty", ""))
        if key in ENUMS or leaf in ENUMS:
            out.append(("not one of the names", "bogus"))
        if key in PRICES:
            out += [("not a price", "USD 12"), ("not a price", "abc"), ("zero", "0"), ("negative", "-1"),
                    ("lower case code", "12 usd")]
        if key in LEDGER_NAMES:
            out.append(("a control character", "a\u0001b"))
        out += [("a path of the wrong kind", p) for p in si.path_values(key, kind)]
    return out


def run(exe, config):
    p = subprocess.run([exe, "--config", config, "--check-config", "--quiet", "--no-plot"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, p.stderr


def names(stderr, key):
    return re.search(r"(^|[\s:])" + re.escape(key) + r"([:\s,]|$)", stderr) is not None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, configs = sys.argv[1], sys.argv[2:]
    failures, cases = [], 0
    with tempfile.TemporaryDirectory(prefix="frugal_config_keys_") as tmp:
        si = stand_ins(tmp)
        # A config path that is a directory is said to be one, not "empty".
        rc, err = run(exe, si.a_dir)
        cases += 1
        if rc == 0 or "is a directory" not in err:
            failures.append(f"--config {si.a_dir} (a directory): exit {rc}, stderr: {err.strip()}")
        for config in configs:
            with open(config) as f:
                doc = json.load(f)
            kind = doc.get("model", {}).get("kind", "mlp")
            base = si.hermetic(doc, os.path.join(tmp, "out"))
            case = os.path.join(tmp, "case_" + os.path.basename(config))
            with open(case, "w") as f:
                json.dump(base, f)
            rc, err = run(exe, case)
            if rc != 0:  # reported, and the cases still run: each names its own key or fails
                failures.append(f"{config}: the hermetic base copy is refused (exit {rc}): {err.strip()}")
            for parts, value in walk(base):
                for what, bad in invalid_values(parts, value, kind, si):
                    key = path_str(parts)
                    with open(case, "w") as f:
                        json.dump(set_at(base, parts, bad), f)
                    rc, err = run(exe, case)
                    cases += 1
                    if rc == 0 or not names(err, key) or case not in err:
                        failures.append(f"{os.path.basename(config)}: {key} = {json.dumps(bad)} ({what}): "
                                        f"exit {rc}, stderr: {err.strip() or '(nothing)'}")
    for f in failures:
        print("FAIL", f)
    print(f"{cases - len(failures)} of {cases} invalid values refused by their key's full path")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
