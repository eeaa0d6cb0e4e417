// Command kstatus prints what Flux's readiness check (kstatus, from sigs.k8s.io/cli-utils) says
// of one Kubernetes object: it reads the object as YAML or JSON on stdin and writes one JSON
// line, {"status": "Current" | "InProgress" | "Failed" | "Terminating" | "Unknown",
// "message": ...}. Flux's kustomize-controller and helm-controller wait on the same function,
// status.Compute, so the tests show with it what Flux reads from an EventHubConsumer's status.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	text, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	// JSON is YAML too: one path reads both.
	body, err := yaml.YAMLToJSON(text)
	if err != nil {
		return fmt.Errorf("stdin is not one YAML or JSON object: %w", err)
	}
	object := &unstructured.Unstructured{}
	if err := object.UnmarshalJSON(body); err != nil {
		return fmt.Errorf("stdin is not a Kubernetes object (apiVersion, kind): %w", err)
	}
	result, err := status.Compute(object)
	if err != nil {
		return fmt.Errorf("computing the status: %w", err)
	}
	return json.NewEncoder(out).Encode(verdict{Status: string(result.Status), Message: result.Message})
}
