"""What the API server does differently for each kind of object, one strategy per resource.

As kube-apiserver's `pkg/registry/<group>/<resource>/strategy.go`: every write goes through
the resource's strategy (defaults, validation, what a delete may refuse or set off), so that
neither the store, the HTTP layer nor the controllers test which resource they hold.
`core/resources.py` pairs each built-in resource type with its strategy.
"""
