"""The one exception users see.

The CLI turns an `LzeBenchError` into one line on stderr and exit code 2, so
every message must name the field (or file/row) at fault and the fix.
"""


class LzeBenchError(Exception):
    """A user-facing error: bad config, bad data, a missing optional dependency."""


def missing_dependency(package: str, extra: str | None = None, why: str = "") -> LzeBenchError:
    """Error for an optional heavy dependency (vllm, openrlhf) that is not installed."""
    hint = f"pip install 'lze-bench[{extra}]'" if extra else f"pip install {package}"
    reason = f" ({why})" if why else ""
    return LzeBenchError(f"{package} is not installed{reason}; install it with: {hint}")


def damaged_file(path, exc: BaseException, fix: str) -> LzeBenchError:
    """Error for a file that exists but cannot be read (truncated, overwritten, half-copied).

    The caller raises it before writing anything, so the damaged file is left
    exactly as found; `fix` says what the user can do (restore it, delete it,
    start over in a new directory).
    """
    reason = " ".join(str(exc).split())[:160] or type(exc).__name__
    return LzeBenchError(f"{path} is damaged and was left as is ({type(exc).__name__}: {reason}); {fix}")
