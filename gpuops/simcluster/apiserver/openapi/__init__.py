"""OpenAPI v2 and v3 as kube-apiserver serves them, and the field validation that uses them."""
