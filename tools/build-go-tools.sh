#!/usr/bin/env bash
# Builds the Go tools pinned in tools/go-tools.env from the Go module proxy, once per machine, into
#   ${SPLITSTACK_TOOLS_CACHE:-$HOME/.cache/splitstack/tools}/<digest of go-tools.env>/
#     bin/      pulumi, pulumi-resource-kubernetes, etcd, kube-apiserver, kube-controller-manager,
#               kube-scheduler, kubectl, kwok (each stamped with its version)
#     crds/     the CRDs of KEDA and prometheus-operator, from their modules' YAML
#     kwok/     kwok's stages (node heartbeat with lease, pod ready/complete/delete, volume
#               provisioning for StorageClass kwok-volume), from its module
#     go/       GOMODCACHE and GOCACHE (wrapper modules live in src/)
# A finished build leaves bin/.complete; a second run with the same file does nothing. Nothing is
# written into the repository. Usage: tools/build-go-tools.sh [--print-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
versions="$here/go-tools.env"
# The cache key covers the pins and this recipe (stack/cluster/tools.py computes the same digest).
digest=$(cat "$versions" "$here/build-go-tools.sh" | sha256sum | cut -c1-12)
root="${SPLITSTACK_TOOLS_CACHE:-$HOME/.cache/splitstack/tools}"
out="$root/$digest"
if [ "${1:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
if [ -f "$out/bin/.complete" ]; then echo "go tools: up to date in $out/bin"; exit 0; fi
command -v go >/dev/null || { echo "go tools: no 'go' on PATH; install Go 1.26 (the module proxy is the only source)" >&2; exit 2; }

# shellcheck source=/dev/null
set -a; . "$versions"; set +a
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOMODCACHE="$root/go/mod" GOCACHE="$root/go/build"   # shared by every digest: modules are immutable
bin="$out/bin"; src="$out/src"; mkdir -p "$bin" "$src" "$out/crds"
log() { printf '%s go tools: %s\n' "$(date +%H:%M:%S)" "$*"; }
t0=$(date +%s)
wrapper() {  # a fresh main module: replace directives of dependencies are ignored, ours apply
  rm -rf "${src:?}/$1"; mkdir -p "$src/$1"; cd "$src/$1"; go mod init "local/$1" >/dev/null 2>&1
}
moddir() { go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }

# --- etcd (the server module has local replaces: a wrapper, not `go install`)
log "etcd $ETCD_VERSION"
wrapper etcd
go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null
go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3

# --- kwok (no replaces; version stamped as its releases are)
log "kwok $KWOK_VERSION"
wrapper kwok
go get "sigs.k8s.io/kwok@v$KWOK_VERSION" >/dev/null
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok

# --- Kubernetes control plane and kubectl (k8s.io/kubernetes replaces every staging module with
#     ./staging/...; the wrapper replaces each with its published v0.<minor>.<patch>)
log "kubernetes $KUBERNETES_VERSION"
wrapper kubernetes
kmod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
staging_version="v0.${KUBERNETES_VERSION#1.}"
for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*|\1|p' "$kmod"); do
  go mod edit -replace="$m=$m@$staging_version"
done
grep -q '^godebug' "$kmod" && grep '^godebug' "$kmod" >> go.mod
go get "k8s.io/kubernetes@v$KUBERNETES_VERSION" >/dev/null
minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
ldf="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldf="$ldf -X $p.gitVersion=v$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
go build -trimpath -ldflags "$ldf" -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

# --- Pulumi CLI (pkg/v3 has local replaces: a wrapper)
log "pulumi $PULUMI_VERSION"
wrapper pulumi
go mod edit -replace=github.com/atotto/clipboard=github.com/tgummerer/clipboard@v0.0.0-20241001131231-d02d263e614e
go get "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION" "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION" >/dev/null
go build -trimpath -tags osusergo,grpcnotrace \
  -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
  -o "$bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi

# --- the Kubernetes resource provider: its main package embeds schema-embed.json and
#     terraform-mapping-embed.json, which upstream generates and does not commit; made here from
#     the committed schema.json / terraform-mapping.json as its generate.go does.
log "pulumi-resource-kubernetes $PULUMI_KUBERNETES_VERSION"
wrapper provider
go get "github.com/pulumi/pulumi-kubernetes/provider/v4@$PULUMI_KUBERNETES_PROVIDER_MODULE" \
  "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_KUBERNETES_PULUMI_SDK" "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_KUBERNETES_PULUMI_SDK" >/dev/null
pdir=$(moddir "github.com/pulumi/pulumi-kubernetes/provider/v4@$PULUMI_KUBERNETES_PROVIDER_MODULE")
cp "$pdir/cmd/pulumi-resource-kubernetes/main.go" . && chmod u+w main.go
VERSION="$PULUMI_KUBERNETES_VERSION" SRC="$pdir/cmd/pulumi-resource-kubernetes" python3 - <<'PY'
import json, os
src = os.environ["SRC"]
schema = json.load(open(os.path.join(src, "schema.json")))
schema["version"] = os.environ["VERSION"]
json.dump(schema, open("schema-embed.json", "w"), separators=(",", ":"))
json.dump(json.load(open(os.path.join(src, "terraform-mapping.json"))), open("terraform-mapping-embed.json", "w"), separators=(",", ":"))
PY
[ -f "$pdir/cmd/pulumi-resource-kubernetes/helm-mapping.json" ] && cp "$pdir/cmd/pulumi-resource-kubernetes/helm-mapping.json" .
go mod tidy >/dev/null
go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_KUBERNETES_VERSION" \
  -o "$bin/pulumi-resource-kubernetes" .

# --- CRDs of the operators the program uses, from their pinned modules
log "CRDs: keda $KEDA_VERSION, prometheus-operator $PROMETHEUS_OPERATOR_VERSION"
cd "$src"
kdir=$(moddir "github.com/kedacore/keda/v2@v$KEDA_VERSION")
podir=$(moddir "github.com/prometheus-operator/prometheus-operator@v$PROMETHEUS_OPERATOR_VERSION")
rm -rf "$out/crds"; mkdir -p "$out/crds"
cp "$kdir"/config/crd/bases/keda.sh_*.yaml "$out/crds/"
cp "$podir"/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml "$out/crds/"
chmod u+w "$out"/crds/*
# kwok runs without kwokctl: its --config carries the stages kwokctl would write.
kwdir=$(moddir "sigs.k8s.io/kwok@v$KWOK_VERSION")
rm -rf "$out/kwok"; mkdir -p "$out/kwok"
for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
         pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete \
         volume/fast/pvc-provision volume/fast/pv-bind volume/fast/pvc-delete volume/fast/pv-delete; do
  echo "---"; cat "$kwdir/kustomize/stage/$f.yaml"
done > "$out/kwok/stages.yaml"

chmod -R u+w "$src"
echo "$versions" > "$bin/.complete"
log "done in $(( $(date +%s) - t0 )) s: $bin ($(du -sh "$out" | cut -f1) with sources; module and build caches $(du -sh "$root/go" | cut -f1))"
