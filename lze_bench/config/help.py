"""What a command's configuration offers, for `--help` and shell completion.

Everything is read from the same place `compose()` reads it, so `--help` and
Tab never list a stale option: a command's config groups are the entries of
its primary config's `defaults` list (TrainConfig, EvalConfig, ...), a group's
options come from its registry or its YAML folders (`group_options`), and the
other keys are the primary config's fields. `sweep` takes every `train`
override besides its own, so it shows both.
"""

from __future__ import annotations

import dataclasses

from lze_bench.config import CONFIGS, compose, group_options, register_all

# how each group is chosen, said once for --help
GROUP_NOTES = {
    "selector": "or selector=MODULE:CLASS (a plug-in); see `lze-bench selectors` for each one's defaults",
    "model": "or model=PATH_OR_HF_ID",
    "eval": "a suite from evals/, or eval=PATH.yaml",
    "sweep": "a recipe from sweeps/, or sweep=PATH.yaml",
}
# commands whose trailing arguments also include `train` overrides
ALSO_TRAIN = {"sweep": "train"}


def command_groups(name: str) -> list[tuple[str, str | None]]:
    """(group, default option) of primary config `name`, in its defaults-list order."""
    register_all()
    defaults = _field(name, "defaults")
    groups = []
    for entry in defaults.default_factory() if defaults else []:
        if isinstance(entry, dict):
            groups += [(str(group), option) for group, option in entry.items()]
    return groups


def command_keys(name: str) -> list[str]:
    """Top-level keys that are not groups: `trainer.*` for a nested node, `seed` for a value."""
    register_all()
    groups = {group for group, _ in command_groups(name)}
    keys = []
    for f in dataclasses.fields(CONFIGS[name]):
        if f.name == "defaults" or f.name in groups:
            continue
        nested = f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory())
        keys.append(f"{f.name}.*" if nested else f.name)
    return keys


def _field(name: str, key: str):
    return next((f for f in dataclasses.fields(CONFIGS[name]) if f.name == key), None)


def help_rows(name: str) -> list[tuple[str, str]]:
    """(left, right) rows for a command's `--help`: one per config group, then the other keys."""
    rows = []
    names = [name] + ([ALSO_TRAIN[name]] if name in ALSO_TRAIN else [])
    seen = set()
    for command in names:
        for group, default in command_groups(command):
            if group in seen:
                continue
            seen.add(group)
            options = ", ".join(group_options(group)) or "(none found)"
            default_text = f" [default: {default}]" if default else ""
            note = f"; {GROUP_NOTES[group]}" if group in GROUP_NOTES else ""
            rows.append((f"{group}=", f"{options}{default_text}{note}"))
    for command in names:
        keys = [k for k in command_keys(command) if k not in seen]
        seen.update(keys)
        if keys:
            rows.append(("keys" if command == name else f"{command} keys", ", ".join(keys)))
    rows.append(("", f"every key with its value: lze-bench {name} --cfg [OVERRIDES]"))
    for command in names[1:]:
        rows.append(("", f"every {command} key: lze-bench {command} --cfg [OVERRIDES]"))
    return rows


def complete_override(name: str, previous: list[str], incomplete: str) -> list[str]:
    """Shell completions for one override being typed after the `previous` arguments.

    `selector=l` -> `selector=lze`; `tra` -> `trainer.`; `trainer.st` -> `trainer.steps=`.
    bash splits words at `=`, so it sends `selector`, `=`, `l` apart: the
    value alone is then completed (`previous` ends with the key and `=`).
    """
    if previous[-2:-1] and previous[-1:] == ["="]:  # bash: `selector`, `=`, then the value being typed
        return [option for option in _values(name, previous[-2].lstrip("+~")) if option.startswith(incomplete)]
    if incomplete == "=" and previous:  # bash: the `=` itself is the word being completed
        return _values(name, previous[-1].lstrip("+~"))
    key, sep, value = incomplete.partition("=")
    if sep:
        return [f"{key}={option}" for option in _values(name, key.lstrip("+~")) if option.startswith(value)]
    return [key for key in _keys(name, previous, incomplete) if key.startswith(incomplete)]


def _values(name: str, key: str) -> list[str]:
    names = [name] + ([ALSO_TRAIN[name]] if name in ALSO_TRAIN else [])
    groups = {group for command in names for group, _ in command_groups(command)}
    if key in groups:
        return group_options(key)
    return []


def _keys(name: str, previous: list[str], incomplete: str) -> list[str]:
    """`group=` and `node.` at the top level; `node.key=` below it (from the config composed so far)."""
    from omegaconf import DictConfig, OmegaConf

    names = [name] + ([ALSO_TRAIN[name]] if name in ALSO_TRAIN else [])
    groups = {group for command in names for group, _ in command_groups(command)}
    if "." not in incomplete:
        top = [f"{group}=" for group in groups] + [f"{group}." for group in groups]
        top += [f"{k[:-2]}." if k.endswith(".*") else f"{k}=" for command in names for k in command_keys(command)]
        return sorted(set(top))
    parent_key = incomplete.rpartition(".")[0]
    chosen = [p for p in previous if "=" in p and p.partition("=")[0].lstrip("+~") in groups]
    for command in names:
        try:  # the groups chosen so far decide the keys (selector=lze has selector.keep_ratio)
            cfg = compose(command, [p for p in chosen if p.partition("=")[0].lstrip("+~") in
                                    {g for g, _ in command_groups(command)}])
        except Exception:  # a half-typed command line: complete nothing rather than fail
            continue
        node = OmegaConf.select(cfg, parent_key)
        if isinstance(node, DictConfig):
            return [f"{parent_key}.{k}" + ("." if isinstance(node[k], DictConfig) else "=") for k in node.keys()]
    return []
