"""CPU import stub of flash_attn.utils.distributed (tests only)."""


def all_gather(*args, **kwargs):
    raise RuntimeError("flash_attn stub: all_gather is not available on CPU")
