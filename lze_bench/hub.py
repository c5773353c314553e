"""A model given as a Hugging Face hub id: reachable, cached, or one line saying which.

`from_pretrained` on an id it cannot reach retries each file five times with
backoff (huggingface_hub `http_backoff`: 1+2+4+8+8 s), tokenizer and model
alike, printing a warning per try: 22 lines and about a minute before a
two-line error, and the same retries before it falls back to a cached copy.
So before any model loads, `hub_model_path` asks the hub once (`model_info`,
a single request without retries) and decides:

* a local directory, or a hub id the hub answers for: load as usual;
* the hub unreachable (or HF_HUB_OFFLINE set) and the model cached: load
  the cached snapshot directory, so no loader tries the network (transformers
  5 looks for a PEFT adapter online even with `local_files_only=True`);
* unreachable and not cached, or no such model: one LzeBenchError line.

Choices: the answer is remembered per id for the life of the process (a
trainer loads its initial policy twice); a gated model answers like any other
here and its access error is left to transformers; a path that is neither an
existing directory nor a valid `owner/name` id fails here, since the hub
could only answer "invalid id".
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

from lze_bench import env
from lze_bench.errors import LzeBenchError

PROBE_TIMEOUT_S = 10.0


def offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (read here from the environment, at call time)."""
    return env.hub_offline()


def hub_model_path(path: str, key: str = "model") -> str:
    """What to hand `from_pretrained` for `path` (a directory or a hub id): `path` itself, or the
    directory of its cached snapshot when the hub cannot be asked; one LzeBenchError line otherwise."""
    if Path(path).expanduser().exists():
        return str(Path(path).expanduser())
    return _hub_id_path(str(path), key, offline())


@functools.lru_cache(maxsize=None)
def _hub_id_path(repo_id: str, key: str, is_offline: bool) -> str:
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise LzeBenchError(f"{key}={repo_id}: no such directory, and not a Hugging Face hub id (owner/name); "
                            "pass an existing checkpoint directory or a hub id") from None
    config = try_to_load_from_cache(repo_id, "config.json")
    cached = str(Path(config).parent) if isinstance(config, str) else None
    if is_offline:
        if cached:
            return cached
        raise LzeBenchError(f"{key}={repo_id}: HF_HUB_OFFLINE is set and the model is not in the Hugging Face cache; "
                            f"download it where there is network (hf download {repo_id}) or pass a local directory")
    try:
        HfApi().model_info(repo_id, timeout=PROBE_TIMEOUT_S)
    except GatedRepoError:
        return repo_id  # it exists; transformers says what access it needs
    except RepositoryNotFoundError:
        raise LzeBenchError(f"{key}={repo_id}: no such model on the Hugging Face hub (a private one needs "
                            "`hf auth login`); pass a hub id or a local directory") from None
    except _network_errors() as exc:  # no network, DNS, timeout, a 5xx
        if cached:
            return cached
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise LzeBenchError(f"{key}={repo_id}: the Hugging Face hub cannot be reached ({reason}) and the model is "
                            "not cached; download it where there is network (hf download "
                            f"{repo_id}) or pass a local directory") from None
    return repo_id


def _network_errors() -> tuple[type[BaseException], ...]:
    """OSError covers requests' errors and huggingface_hub's HTTP errors; the HTTP clients of hub >= 1.0 raise
    their own, which are not OSErrors: httpx's (hub 1.x) and httpx2's (hub 2.x)."""
    errors: list[type[BaseException]] = [OSError]
    for client in ("httpx", "httpx2"):
        try:
            errors.append(importlib.import_module(client).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)
