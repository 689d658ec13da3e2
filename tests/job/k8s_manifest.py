#!/usr/bin/env python3
"""Checks examples/batch_job/k8s/indexed-job.yaml: the fields a sharded frugal_batch_job needs, and, where
kubernetes-validate (PyPI; it carries the Kubernetes JSON schemas, so it runs offline) is given, the schema.

    k8s_manifest.py MANIFEST fields            needs python3-yaml
    k8s_manifest.py MANIFEST schema [TOOL]     runs TOOL --strict on it; without TOOL, skipped

A missing python3-yaml or tool prints "frugal-skip:" (ctest reports the test skipped), unless FRUGAL_REQUIRE
names it ("python3-yaml", "kubernetes-validate"): then it fails.
"""
import os
import subprocess
import sys


def missing(name, why):
    required = os.environ.get("FRUGAL_REQUIRE", "").split(",")
    if name in required or "all" in required:
        sys.exit(f"missing, and FRUGAL_REQUIRE requires it: {name}: {why}")
    print(f"frugal-skip: missing {name}: {why}")
    sys.exit(0)


def flag(args, name):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def check_fields(path):
    try:
        import yaml
    except ImportError:
        missing("python3-yaml", "the manifest's fields are checked with PyYAML (Debian: python3-yaml)")
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    errors = []

    def need(cond, what):
        if not cond:
            errors.append(what)

    pvcs = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    jobs = [d for d in docs if d["kind"] == "Job"]
    shard_jobs = [j for j in jobs if j["spec"].get("completionMode") == "Indexed"]
    need(len(shard_jobs) == 1, "one Job with completionMode: Indexed")
    job = shard_jobs[0]["spec"]
    count = job.get("completions")
    need(isinstance(count, int) and count >= 1, "completions >= 1")
    need(isinstance(job.get("parallelism"), int) and 1 <= job["parallelism"] <= count,
         "parallelism in 1 .. completions")
    need(isinstance(job.get("backoffLimitPerIndex"), int), "backoffLimitPerIndex")
    pod = job["template"]["spec"]
    need(pod.get("restartPolicy") == "Never", "restartPolicy: Never (podFailurePolicy needs it)")
    need(bool(pod.get("nodeSelector")), "a spot nodeSelector")
    need(any(t.get("effect") == "NoSchedule" for t in pod.get("tolerations", [])), "a spot toleration")
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    need(env.get("FRUGAL_SHARD_COUNT") == str(count), "FRUGAL_SHARD_COUNT equal to completions")
    need(flag(c["args"], "--shard-index") is None, "no --shard-index: the pod's JOB_COMPLETION_INDEX gives it")
    prefix = flag(c["args"], "--output-prefix")
    need(prefix is not None, "--output-prefix")
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
              if "persistentVolumeClaim" in v}
    on_volume = [n for n, at in mounts.items() if prefix and prefix.startswith(at.rstrip("/") + "/")]
    need(len(on_volume) == 1 and claims.get(on_volume[0]) in pvcs,
         "--output-prefix on a mounted volume backed by the manifest's PersistentVolumeClaim")
    deadline = flag(c["args"], "--deadline-ms")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    need(deadline is not None and int(deadline) < grace * 1000,
         "--deadline-ms below terminationGracePeriodSeconds, so the checkpoint lands before SIGKILL")
    for rule in job.get("podFailurePolicy", {}).get("rules", []):
        codes = rule.get("onExitCodes", {}).get("values", [])
        need(not (rule["action"] == "FailIndex" and (75 in codes or 74 in codes)),
             "exit 74 and 75 are resumable, never FailIndex")
    merges = [j for j in jobs if any("--merge" in ct.get("args", [])
                                     for ct in j["spec"]["template"]["spec"]["containers"])]
    need(len(merges) == 1, "one merge Job")
    if merges:
        (m,) = merges[0]["spec"]["template"]["spec"]["containers"]
        need(flag(m["args"], "--shard-count") == str(count), "the merge's --shard-count equal to completions")
        need(flag(m["args"], "--output-prefix") == prefix, "the merge's --output-prefix equal to the shards'")
    if errors:
        sys.exit(f"{path}: " + "; ".join(errors))
    print(f"{path}: fields ok ({count} shards)")


def check_schema(path, tool):
    if not tool or tool.endswith("-NOTFOUND"):
        missing("kubernetes-validate", "the schema check runs `kubernetes-validate --strict` "
                "(pip install kubernetes-validate; configure with -DFRUGAL_KUBERNETES_VALIDATE=PATH)")
    r = subprocess.run([tool, "--strict", path], capture_output=True, text=True)
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        sys.exit(f"{path}: kubernetes-validate --strict failed")


if __name__ == "__main__":
    if sys.argv[2] == "fields":
        check_fields(sys.argv[1])
    else:
        check_schema(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else None)
