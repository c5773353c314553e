"""CPU import stub of vllm.utils (tests only)."""

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
