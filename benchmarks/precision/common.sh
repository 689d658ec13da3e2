# shellcheck shell=bash
# Sourced by run.sh and llm.sh: what both need to find a plotting Python and to name the code they measured.

# Checks the command line (<out-dir>, nothing else), makes the folder and prints its absolute path.
out_dir() {
  if [[ $# -ne 2 ]]; then
    echo "usage: $1 <out-dir>" >&2
    return 2
  fi
  mkdir -p "$2"
  (cd "$2" && pwd)
}

# Prints an interpreter that imports matplotlib ($PYTHON first), installing Debian's package when run as
# root; fails saying how otherwise. Debian's python3-matplotlib belongs to /usr/bin/python3, which need
# not be the python3 on PATH.
matplotlib_python() {
  local candidate
  for candidate in ${PYTHON:-} /usr/bin/python3 python3; do
    if "$candidate" -c 'import matplotlib' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "precision: installing python3-matplotlib" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y python3-matplotlib >&2
    echo /usr/bin/python3
  else
    echo "precision: matplotlib is missing; run as root: apt-get install -y python3-matplotlib" >&2
    return 1
  fi
}

# Prints the short commit of <root>, plus the top folders of the given paths that differ from it, so the
# figures can be traced to their code.
measured_commit() {
  local root=$1 commit dirty
  shift
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(git -C "$root" status --porcelain -- "$@" ':!benchmarks/precision/results' 2>/dev/null |
    awk '{print $2}' | cut -d/ -f1-3 | sort -u | tr '\n' ' ')
  [[ -z $dirty ]] || commit="$commit, plus uncommitted ${dirty% }"
  echo "$commit"
}

cpu_model_name() {
  grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || echo unknown
}
