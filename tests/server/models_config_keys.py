#!/usr/bin/env python3
"""Every key of frugal_server's --models file, set to an invalid value, is refused by its full path.

A hermetic models file (an embedding entry and a chat entry, every key given, their paths pointed at
stand-ins in a temporary directory) must pass `frugal_server --models FILE --check-config`; then, for every
key and array entry, copies with that value made invalid (a wrong type, out of range, empty, a directory
where a file is expected or a file where a directory is, a name the server refuses) must each exit
non-zero with stderr naming the key's full path (models[1].path) and the file. A --models path that is a
directory is said to be one, and a bad price or export directory flag is named by its flag. Uses tests/demo/config_keys.py's helpers; standard library only.

usage: models_config_keys.py FRUGAL_SERVER
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

_spec = importlib.util.spec_from_file_location(
    "config_keys", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demo", "config_keys.py"))
ck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ck)


def base_config(si):
    return {
        "budget_mb": 4096,
        "models": [
            {"name": "minilm-fp32", "kind": "embedding", "precision": "fp32", "path": si.minilm,
             "pinned": False, "idle_unload_s": 300, "estimated_mb": 100},
            {"name": "smollm2", "kind": "chat", "precision": "native", "path": si.gguf, "pinned": True,
             "idle_unload_s": 0, "estimated_mb": 300, "threads": 2, "kv_budget_mb": 64, "max_running": 8,
             "max_waiting": 64, "step_tokens": 256, "max_context": 0, "default_max_tokens": 64},
        ],
    }


def invalid_values(parts, value, doc, si):
    key, leaf = ck.path_str(parts), ck.leaf_name(parts)
    out = []
    if isinstance(value, dict):
        out.append(("wrong type", 5))
    elif isinstance(value, list):
        out += [("wrong type", "x"), ("empty", [])]
    elif isinstance(value, bool):
        out.append(("wrong type", "yes"))
        if leaf == "pinned" and not value:
            out.append(("pinned with idle_unload_s > 0", True))
    elif isinstance(value, (int, float)):
        out += [("wrong type", "abc"), ("below range", -1), ("above range", 1e30)]
        if leaf in ("budget_mb", "estimated_mb", "threads", "kv_budget_mb", "max_running", "max_waiting",
                    "step_tokens", "default_max_tokens"):
            out.append(("zero", 0))
        if leaf == "idle_unload_s" and value == 0:
            out.append(("on a pinned model", 60))
        if leaf == "max_running":
            out.append(("above step_tokens", 4096))
    elif isinstance(value, str):
        out.append(("wrong type", 12345))
        chat = doc["models"][parts[1]].get("kind") == "chat" if len(parts) > 2 else False
        if not (leaf == "path" and not chat):  # an embedding entry's empty path: --model DIR's
            out.append(("empty", ""))
        if leaf in ("kind", "precision"):
            out.append(("not one of the names", "bogus"))
        if leaf == "name":
            out += [("a character a Prometheus label refuses", "bad name!"), ("longer than 64", "n" * 65)]
        if leaf == "path":
            out += [("a directory where a GGUF file goes", si.a_dir)] if chat else [
                ("a file where a model directory goes", si.a_file)]
            out.append(("missing", os.path.join(si.root, "missing")))
            if chat:
                out.append(("not a GGUF file", si.text))
    return out


def run(exe, models, *flags):
    p = subprocess.run([exe, "--models", models, "--check-config", *flags], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, p.stderr


def flag_cases(si):
    """Flags the server reads beside --models, each with an invalid value: (flag, value)."""
    return [("--hourly-usd", v) for v in ("0", "-1", "USD 12", "abc")] + \
        [("--semantic-gpu-usd", v) for v in ("0", "1e5 USD")] + \
        [("--export-dir", os.path.join(si.a_file, "out"))]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    exe = sys.argv[1]
    failures, cases = [], 0
    with tempfile.TemporaryDirectory(prefix="frugal_models_keys_") as tmp:
        si = ck.stand_ins(tmp)
        rc, err = run(exe, si.a_dir)
        cases += 1
        if rc == 0 or "is a directory" not in err:
            failures.append(f"--models {si.a_dir} (a directory): exit {rc}, stderr: {err.strip()}")
        base = base_config(si)
        case = os.path.join(tmp, "models.json")
        with open(case, "w") as f:
            json.dump(base, f)
        rc, err = run(exe, case)
        if rc != 0:
            failures.append(f"the hermetic base models file is refused (exit {rc}): {err.strip()}")
        for parts, value in ck.walk(base):
            for what, bad in invalid_values(parts, value, base, si):
                key = ck.path_str(parts)
                with open(case, "w") as f:
                    json.dump(ck.set_at(base, parts, bad), f)
                rc, err = run(exe, case)
                cases += 1
                if rc == 0 or not ck.names(err, key) or case not in err:
                    failures.append(f"{key} = {json.dumps(bad)} ({what}): exit {rc}, stderr: "
                                    f"{err.strip() or '(nothing)'}")
        with open(case, "w") as f:
            json.dump(base, f)
        for flag, bad in flag_cases(si):
            rc, err = run(exe, case, flag, bad)
            cases += 1
            if rc == 0 or not ck.names(err, flag):
                failures.append(f"{flag} {bad}: exit {rc}, stderr: {err.strip() or '(nothing)'}")
    for f in failures:
        print("FAIL", f)
    print(f"{cases - len(failures)} of {cases} invalid values refused by their key's full path")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
