"""What a real API server's admission enforces, checked by the project's own code and cel-python where no server
runs: the Pod Security Standards, the CRDs' CEL rules and Volcano's ValidatingAdmissionPolicies."""
