"""CPU import stub of vllm (tests only; see tests/stubs/README.md)."""

__version__ = "0.29.0"  # the version openrlhf 0.11.2's [vllm] extra pins
STUB = True


class SamplingParams:
    """Holds the keyword arguments OpenRLHF passes; generates nothing."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
        self.kwargs = dict(kwargs)


class AsyncEngineArgs:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class AsyncLLMEngine:
    @classmethod
    def from_engine_args(cls, *args, **kwargs):
        raise RuntimeError("vllm stub: no inference engine on CPU (tests/stubs/vllm)")
