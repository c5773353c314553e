"""CPU import stub of flash_attn.bert_padding: the names OpenRLHF imports; each raises if called."""


def _unavailable(*args, **kwargs):
    raise RuntimeError("flash_attn stub: ring attention / packing kernels are not available on CPU")


index_first_axis = pad_input = unpad_input = _unavailable


def rearrange(*args, **kwargs):  # einops' rearrange is re-exported by flash_attn.bert_padding
    from einops import rearrange as real

    return real(*args, **kwargs)
