#!/usr/bin/env bash
# Checks the fleet deployment (deploy/, docs/DEPLOY.md) without a cluster:
#
#  1. the Prometheus alerts: `promtool check rules`, their unit tests
#     (`promtool test rules`), and every prezero_* metric they name is one
#     the daemon exports (prezero-service/src/metrics/mod.rs);
#  2. the Kubernetes manifests against the API's JSON schemas, strictly (no
#     field the API does not have): kubeconform, with the schemas the PyPI
#     package kubernetes-validate ships (kubeconform downloads its own from
#     GitHub, which this machine cannot reach), made standalone for it; where
#     go is missing, kubernetes-validate's own checker;
#  3. what the daemon will be given: the DaemonSet's configuration and flags
#     run through `prezero serve --check`, and the VM pod's `prezero client
#     exec` command line through the command itself.
#
# Tools come from package registries and stay under target/deploy-tools
# (CARGO_TARGET_DIR): promtool from Debian's prometheus package, kubeconform
# (KUBECONFORM_VERSION) as a Go module, kubernetes-validate (its version pins
# the schemas) from PyPI. A tool that cannot be had is skipped with a line
# saying why; a check that runs and fails fails the script.
#
#   scripts/deploy-check.sh            K8S_VERSION=1.30.0 scripts/deploy-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=${K8S_VERSION:-1.32.0}
KUBECONFORM_VERSION=${KUBECONFORM_VERSION:-v0.8.0}
KUBERNETES_VALIDATE_VERSION=${KUBERNETES_VALIDATE_VERSION:-1.37.0}
tools=$(realpath -m "${CARGO_TARGET_DIR:-target}")/deploy-tools
mkdir -p "$tools"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
alerts=deploy/prometheus/prezero-alerts.yml

# 1. The alerts.
if ! command -v promtool >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends prometheus \
    >"$work/apt.log" 2>&1 || echo "apt-get could not install prometheus (promtool): $(tail -n 1 "$work/apt.log")"
fi
if command -v promtool >/dev/null; then
  promtool check rules "$alerts"
  promtool test rules deploy/prometheus/prezero-alerts.test.yml
else
  echo "skipped: promtool check rules and test rules (no promtool: apt-get install prometheus)"
fi
missing=()
for name in $(grep -o 'prezero_[a-z][a-z_]*' "$alerts" | sort -u); do
  grep -q "\"$name\"" prezero-service/src/metrics/mod.rs || missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "$alerts names metrics the daemon does not export: ${missing[*]}" >&2
  exit 1
fi
echo "alerts: every prezero_* metric they name is exported"

# 2. The manifests against the API's schemas.
venv=$tools/venv
if [ ! -x "$venv/bin/kubernetes-validate" ] \
   || [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" != "$KUBERNETES_VALIDATE_VERSION" ]; then
  rm -rf "$venv"
  { python3 -m venv "$venv" && timeout 600 "$venv/bin/pip" install -q --disable-pip-version-check \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"; } >"$work/pip.log" 2>&1 \
    || { echo "pip could not install kubernetes-validate: $(tail -n 1 "$work/pip.log")"; rm -rf "$venv"; }
fi
if command -v go >/dev/null && [ ! -x "$tools/bin/kubeconform-$KUBECONFORM_VERSION" ]; then
  if GOBIN=$work/gobin timeout 600 go install \
      "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION" >"$work/go.log" 2>&1; then
    mkdir -p "$tools/bin"
    mv "$work/gobin/kubeconform" "$tools/bin/kubeconform-$KUBECONFORM_VERSION"
  else
    echo "go install could not build kubeconform $KUBECONFORM_VERSION: $(tail -n 1 "$work/go.log")"
  fi
fi
manifests=(deploy/kubernetes/*.yaml)
if [ ! -x "$venv/bin/python" ]; then
  echo "skipped: the manifests' schema check (no kubernetes-validate, whose package ships the schemas)"
elif [ -x "$tools/bin/kubeconform-$KUBECONFORM_VERSION" ]; then
  # kubernetes-validate's schemas for one version, as kubeconform reads them:
  # its references to https://kubernetes.io/api/_definitions.json made
  # relative to the file, and no $id to resolve them against instead.
  schemas=$tools/schemas-$KUBERNETES_VALIDATE_VERSION
  if [ ! -d "$schemas/v$K8S_VERSION-standalone-strict" ]; then
    "$venv/bin/python" - "$K8S_VERSION" "$schemas" <<'PY'
import json, os, sys
import kubernetes_validate
version, out = sys.argv[1], sys.argv[2]
base = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
src = os.path.join(base, f"v{version}-local-strict")
if not os.path.isdir(src):
    sys.exit(f"kubernetes-validate has no schemas of Kubernetes {version}: {sorted(os.listdir(base))}")
dst = os.path.join(out, f"v{version}-standalone-strict")
os.makedirs(dst + ".tmp", exist_ok=True)
for name in os.listdir(src):
    with open(os.path.join(src, name)) as f:
        text = f.read().replace('"/api/_definitions.json#', '"_definitions.json#')
    doc = json.loads(text)
    doc.pop("$id", None)
    with open(os.path.join(dst + ".tmp", name), "w") as f:
        json.dump(doc, f)
os.rename(dst + ".tmp", dst)
PY
  fi
  "$tools/bin/kubeconform-$KUBECONFORM_VERSION" -strict -summary -kubernetes-version "$K8S_VERSION" \
    -schema-location "$schemas/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
    "${manifests[@]}"
else
  echo "kubeconform unavailable (no go, or it did not build): kubernetes-validate checks the manifests instead"
  "$venv/bin/kubernetes-validate" --strict -k "$K8S_VERSION" "${manifests[@]}"
fi

# 3. What the daemon and the client will be given, through the command
# itself: the ConfigMap's configuration with the DaemonSet's flags (the
# Downward API's hugetlb bytes put in), and the VM pod's command line.
if [ ! -x "$venv/bin/python" ]; then
  echo "skipped: the manifests' commands (no Python with PyYAML: the venv of kubernetes-validate)"
  exit 0
fi
cargo build -q -p prezero-cli
prezero=$(realpath -m "${CARGO_TARGET_DIR:-target}")/debug/prezero
"$venv/bin/python" - "$work" <<'PY'
import sys, yaml
work = sys.argv[1]
units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
def quantity(q):
    for suffix, n in units.items():
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) * n
    return int(q)
docs = [d for d in yaml.safe_load_all(open("deploy/kubernetes/prezero-daemonset.yaml")) if d]
config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["prezero.toml"]
open(f"{work}/prezero.toml", "w").write(config)
ds = next(d for d in docs if d["kind"] == "DaemonSet")
daemon = next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "prezero")
pool_bytes = str(quantity(daemon["resources"]["limits"]["hugepages-2Mi"]))
args = [a.replace("$(POOL_BYTES)", pool_bytes) for a in daemon["args"]]
args = [f"{work}/prezero.toml" if a == "/etc/prezero/prezero.toml" else a for a in args]
open(f"{work}/serve.args", "w").write("\n".join(args + ["--check"]) + "\n")
pod = yaml.safe_load(open("deploy/kubernetes/vm-pod.yaml"))
command = pod["spec"]["containers"][0]["command"]
open(f"{work}/exec.args", "w").write("\n".join(command[1:]) + "\n")
PY
mapfile -t serve_args <"$work/serve.args"
"$prezero" "${serve_args[@]}"
mapfile -t exec_args <"$work/exec.args"
# No daemon at this socket: a command line that parses, and whose
# placeholders do, gets as far as asking for the memory, and --no-fallback
# makes that an error.
if PREZERO_SOCKET=$work/none.sock "$prezero" "${exec_args[@]}" 2>"$work/exec.err"; then
  echo "the VM pod's command ran without a service" >&2
  exit 1
fi
grep -q "cannot connect to $work/none.sock" "$work/exec.err" \
  || { echo "the VM pod's command line:" >&2; cat "$work/exec.err" >&2; exit 1; }
echo "the VM pod's command line parses (without a service it fails: $(cat "$work/exec.err"))"
echo "deploy check: ok"
