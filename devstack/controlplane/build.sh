#!/usr/bin/env bash
# Builds the real control plane into devstack/controlplane/bin/ from the two pinned Go modules
# beside this script: kube-apiserver and kube-controller-manager (kubernetes/go.mod) and etcd
# (etcd/go.mod). `make controlplane` runs it; `make install` (and so `make test`) too.
#
# It skips the build while the pins match: bin/.pins records a hash of both modules' go.mod and
# go.sum, this script and the Go version that built them. A build goes to a temporary folder
# first and moves in whole, so a build cut short never leaves a half-updated bin/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/bin"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

command -v go >/dev/null || {
  echo "the control plane is built with Go 1.26 or newer: install Go (https://go.dev/doc/install)" >&2
  exit 1
}

pins="$( { cat "$here/kubernetes/go.mod" "$here/kubernetes/go.sum" "$here/etcd/go.mod" \
  "$here/etcd/go.sum" "$0"; go version; } | sha256sum | cut -d' ' -f1)"
if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/etcd" \
      && "$(cat "$bin/.pins" 2>/dev/null)" == "$pins" ]]; then
  echo "control plane up to date in ${bin#"$PWD/"}"
  exit 0
fi

# The version each binary reports (`kubectl version`, /version): the pinned release, its date
# from the module proxy, and the module's content hash from go.sum in place of a git commit
# (a module carries no commit).
module_version() { sed -n "s#^require $1 \(v[^ ]*\)\$#\1#p; s#^\t$1 \(v[^ ]*\)\$#\1#p" "$2" | head -1; }
kube_version="$(module_version k8s.io/kubernetes "$here/kubernetes/go.mod")"
etcd_version="$(module_version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")"
[[ -n "$kube_version" && -n "$etcd_version" ]] || { echo "cannot read the pinned versions" >&2; exit 1; }
kube_hash="$(grep "^k8s.io/kubernetes $kube_version h1:" "$here/kubernetes/go.sum" | cut -d' ' -f3)"
kube_date="$(cd "$here/kubernetes" && go mod download -json "k8s.io/kubernetes@$kube_version" \
  | sed -n 's/.*"Time": "\(.*\)".*/\1/p' | head -1)"
minor="${kube_version#v1.}"; minor="${minor%%.*}"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitCommit=$kube_hash -X $pkg.gitTreeState=clean -X $pkg.buildDate=$kube_date"
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version"

staging="$(mktemp -d "$here/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
start=$SECONDS
echo "building kube-apiserver and kube-controller-manager $kube_version (first build: several minutes)"
(cd "$here/kubernetes" && go build -trimpath -ldflags "$kube_ldflags" -o "$staging/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
echo "building etcd $etcd_version"
(cd "$here/etcd" && go build -trimpath -ldflags "$etcd_ldflags" -o "$staging/etcd" .)
echo "$pins" > "$staging/.pins"
mkdir -p "$bin"
for f in kube-apiserver kube-controller-manager etcd .pins; do mv -f "$staging/$f" "$bin/$f"; done
echo "control plane built in $((SECONDS - start)) s into ${bin#"$PWD/"}"
