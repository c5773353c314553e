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


# What a full disk looks like on the way out: the OS's errno, or torch's zip writer, which reports a short write
# as "unexpected pos N vs M" (or "file write failed") in a RuntimeError that never says why
DISK_FULL_ERRNOS = (28, 122)  # ENOSPC, EDQUOT (a quota: full for this user)
TORCH_SHORT_WRITE = ("unexpected pos", "file write failed")


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from) is a write that failed for want of space."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        text = str(exc)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        if isinstance(exc, RuntimeError) and any(marker in text for marker in TORCH_SHORT_WRITE):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full(path, exc: BaseException, fix: str) -> LzeBenchError:
    """One line for a write that ran out of space: the file, that the disk is full, and `fix`."""
    reason = " ".join(str(exc).split())[:120] or type(exc).__name__
    return LzeBenchError(f"{path}: the disk is full (no space left on device; {type(exc).__name__}: {reason}); {fix}")
