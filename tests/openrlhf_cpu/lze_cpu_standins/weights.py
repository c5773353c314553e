"""One fingerprint of a set of weights, computed the same way by the policy actor and by a vLLM worker (tests only)."""

from __future__ import annotations


def fingerprint(state: dict) -> str:
    """sha256 over the names (sorted) and the float32 bytes of each tensor: bf16 weights widen exactly, so the
    actor's float32 copy and an engine's received bf16 tensors of the same weights give the same digest."""
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
