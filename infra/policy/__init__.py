"""Policy rules for splitstack's Kubernetes objects, shared by the CrossGuard pack
(``infra/policy/__main__.py``, run by ``pulumi preview --policy-pack infra/policy``) and the
tests. Rules read plain Kubernetes objects (camelCase dicts), never the spec."""
