"""The decoders' core: token trees, drafting policies, runners (models with their KV caches, the fast path and
its kernels, the context lookup), the level-batched drafter and the one decoding loop."""
