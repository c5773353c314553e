"""CPU import stub of flash_attn (tests only; see tests/stubs/README.md)."""

__version__ = "2.8.3"
STUB = True
