//go:build tools

// The one command this module builds (devstack/tools/build.sh): Helm's own main. Importing it
// keeps Helm and its whole dependency graph pinned in go.mod and go.sum.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
