#!/usr/bin/env bash
# Builds the Go tools of devstack/tools/ into a bin folder (make install: the venv's bin), each
# from its own pinned module beside this script:
#   helm     Helm's command-line tool (helm/go.mod pins helm.sh/helm/v3): lint, template and
#            install/upgrade/rollback of charts/ in the tests, and the docs' commands.
#   kstatus  Flux's readiness check (kstatus/go.mod pins sigs.k8s.io/cli-utils): prints what
#            Flux would say of an object read on stdin (tests/install/test_gitops_health.py).
#
# Usage: build.sh BIN_DIR TOOL...
#
# A tool is skipped while its pins match: BIN_DIR/.TOOL.pins records a hash of its module's
# files, this script and the Go version that built it. A build goes to a temporary file first
# and moves in whole, so a build cut short never leaves a half-written binary.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[[ $# -ge 2 ]] || { echo "usage: $0 BIN_DIR TOOL..." >&2; exit 2; }
mkdir -p "$1"
bin="$(cd "$1" && pwd)"; shift
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

command -v go >/dev/null || {
  echo "the tools of devstack/tools/ are built with Go 1.26 or newer: install Go (https://go.dev/doc/install)" >&2
  exit 1
}

# The version a module's go.mod requires of a module path ("require X v1" or inside a block,
# direct or // indirect).
module_version() { sed -n "s#^\(require\|\t\) *$1 \(v[^ ]*\).*#\2#p" "$2" | head -1; }

# Helm's release ldflags (its Makefile's): the version `helm version` shows, and the Kubernetes
# version `helm template` assumes without --kube-version, from the client-go it is built with
# (Helm's default would otherwise be 1.20, below the charts' kubeVersion). GitCommit stays
# empty: a module carries no commit, and `helm version --short` would print any other hash as one.
helm_ldflags() {
  local dir="$here/helm" version client minor
  version="$(module_version helm.sh/helm/v3 "$dir/go.mod")"
  client="$(module_version k8s.io/client-go "$dir/go.mod")"
  minor="${client#v0.}"; minor="${minor%%.*}"
  [[ -n "$version" && -n "$minor" ]] || { echo "cannot read Helm's pins" >&2; return 1; }
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  ldflags+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  echo "$ldflags"
}

staging=""
trap 'rm -f "$staging"' EXIT
for tool in "$@"; do
  dir="$here/$tool"
  [[ -f "$dir/go.mod" ]] || { echo "no tool $tool in ${here#"$PWD/"}" >&2; exit 1; }
  pins="$( { cat "$dir"/go.mod "$dir"/go.sum "$dir"/*.go "$0"; go version; } | sha256sum | cut -d' ' -f1)"
  if [[ -x "$bin/$tool" && "$(cat "$bin/.$tool.pins" 2>/dev/null)" == "$pins" ]]; then
    echo "$tool up to date in ${bin#"$PWD/"}"
    continue
  fi
  case "$tool" in
    helm) ldflags="$(helm_ldflags)"; package=helm.sh/helm/v3/cmd/helm ;;
    *) ldflags="-s -w"; package=. ;;
  esac
  staging="$(mktemp "$bin/.$tool.XXXXXX")"
  start=$SECONDS
  echo "building $tool (first build: a few minutes)"
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$staging" "$package")
  mv -f "$staging" "$bin/$tool"
  echo "$pins" > "$bin/.$tool.pins"
  echo "$tool built in $((SECONDS - start)) s into ${bin#"$PWD/"}"
done
