"""CPU import stub of vllm.inputs (tests only)."""


def TokensPrompt(**kwargs):  # noqa: N802 - vllm's name (a TypedDict there)
    return dict(kwargs)
