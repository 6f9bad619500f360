"""Other engines on the same weights, registered as methods by one explicit call (``register_peers``, which the
package's ``__init__`` makes, so that the registry holds the same methods whatever was imported): llama.cpp (its
server client, its command-line runs, its EAGLE-3 GGUF) and vLLM's CPU build. Imports ``setup`` and ``measure``."""


def register_peers() -> None:
    """llama.cpp's and vLLM's methods and their modes' variants, once."""
    from . import llamacpp, vllm

    llamacpp.register()
    vllm.register()
