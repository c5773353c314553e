"""Compose configuration with Hydra from groups that mirror the registries.

Typer owns argv; Hydra only composes (`hydra.compose`). Everything is put in
Hydra's ConfigStore, so no search path is involved:

* registry groups: `selector`, `backend`, `task`: one option per registry
  entry, its node the entry's `Config` dataclass (they cannot drift);
* YAML groups: `model` (lze_bench/config/model/*.yaml), `launcher`,
  `eval` (packaged + the `evals/` recipes), `sweep` (the `sweeps/` recipes), each
  validated against its dataclass schema when stored; a recipe can also be given
  as a path (`sweep=my/grid.yaml`);
* primary configs (`train`, `replay`, `eval`, `sweep`, ...) from `CONFIGS`.

`compose(name, overrides)` returns a DictConfig whose values have been checked
by the schemas' `__post_init__`; any mistake becomes one `LzeBenchError` line
naming the key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path

from lze_bench import env
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BACKENDS, SELECTORS, TASKS, Registry, unknown_choice

PACKAGE_DIR = Path(__file__).resolve().parent
# The recipe folders of a checkout (`sweeps/`, `evals/` beside `lze_bench/`); a wheel carries a
# copy of them in `lze_bench/recipes/` (setup.py), so an installed lze-bench finds them anywhere.
CHECKOUT_DIR = PACKAGE_DIR.parent.parent
SHIPPED_RECIPES = PACKAGE_DIR.parent / "recipes"

CONFIGS = Registry("command config")  # primary config name -> dataclass
# keys that no longer exist -> what to write instead (one line, not "unknown key")
REPLACED_KEYS = {"backend.tensorboard": "logger=[tensorboard] (event files in <run_dir>/tensorboard/)"}


@dataclass(frozen=True)
class YamlGroup:
    """A config group whose options are YAML files validated by a schema."""

    schema: str  # "module:attribute" of the dataclass (imported lazily)
    folders: tuple[str, ...]  # packaged presets, searched first
    recipe_folder: str = ""  # name of the user-facing recipe folder (`sweeps`, `evals`), if any

    def search_path(self) -> list[Path]:
        """Folders in the order they are read; a later folder's file of the same name wins.

        Packaged presets, then the recipes shipped in the wheel, then the checkout's own
        recipe folder, then each root of `$LZE_BENCH_RECIPES`, then `./<recipe folder>`
        in the current directory: a user's own recipes add to or override the built-in ones.
        """
        folders = [Path(folder) for folder in self.folders]
        if self.recipe_folder:
            folders.append(SHIPPED_RECIPES / self.recipe_folder)
            if (CHECKOUT_DIR / "pyproject.toml").is_file():
                folders.append(CHECKOUT_DIR / self.recipe_folder)
            folders += [Path(root) / self.recipe_folder for root in env.recipe_roots()]
            folders.append(Path(self.recipe_folder))
        return folders


YAML_GROUPS: dict[str, YamlGroup] = {
    "model": YamlGroup("lze_bench.config.schema:ModelConfig", (str(PACKAGE_DIR / "model"),)),
    "launcher": YamlGroup("lze_bench.launchers:LauncherConfig", (str(PACKAGE_DIR / "launcher"),)),
    "eval": YamlGroup("lze_bench.evaluation.suites:SuiteConfig", (str(PACKAGE_DIR / "eval"),), "evals"),
    "sweep": YamlGroup("lze_bench.sweep:SweepSpec", (), "sweeps"),
}

REGISTRY_GROUPS: dict[str, Registry] = {"selector": SELECTORS, "backend": BACKENDS, "task": TASKS}

# Modules whose import fills the registries and CONFIGS.
PLUGIN_MODULES = (
    "lze_bench.selectors",
    "lze_bench.backends",
    "lze_bench.tasks",
    "lze_bench.evaluation.suites",
    "lze_bench.launchers",
    "lze_bench.sweep",
)
# Loads selectors from outside the package (`selector=MODULE:CLASS`, entry points) into SELECTORS and the
# store; by name, like PLUGIN_MODULES: it stands above config (it checks classes against lze_bench.api)
SELECTOR_PLUGINS = "lze_bench.plugins"

_registered = False
_RECIPE_FILES: dict[str, dict[str, Path]] = {}  # group -> option -> file given as a path on the command line
# group -> option -> why its YAML file does not validate; the error is raised when that option is chosen
_BROKEN_OPTIONS: dict[str, dict[str, str]] = {}
# (config name, its config-group overrides) -> Hydra's composed config before any value override;
# emptied whenever the ConfigStore changes (see `_compose_from_base`)
_BASE_CONFIGS: dict[tuple[str, tuple[str, ...]], object] = {}


def forget_compositions() -> None:
    """Drop the kept compositions: the ConfigStore changed (a plug-in's config was stored, or stored anew)."""
    _BASE_CONFIGS.clear()


def _load_attr(spec: str):
    module_name, attr = spec.split(":")
    return getattr(importlib.import_module(module_name), attr)


def register_all() -> None:
    """Fill Hydra's ConfigStore from the registries and YAML folders (once)."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from lze_bench.config import schema  # noqa: F401  (registers train/replay)

    for module in PLUGIN_MODULES:
        importlib.import_module(module)
    importlib.import_module(SELECTOR_PLUGINS).load_entry_points()  # selectors of installed distributions

    store = ConfigStore.instance()
    for name, node in CONFIGS.items():
        store.store(name=name, node=node)
    for group, registry in REGISTRY_GROUPS.items():
        for name, entry in registry.items():
            store.store(group=group, name=name, node=entry.Config)
    for group, spec in YAML_GROUPS.items():
        schema_cls = _load_attr(spec.schema)
        for name, path in yaml_options(group).items():
            try:
                node = load_recipe(schema_cls, path)
            except LzeBenchError as exc:  # kept for when it is chosen: one bad file must not stop every command
                _BROKEN_OPTIONS.setdefault(group, {})[name] = str(exc)
                continue
            store.store(group=group, name=name, node=node)
    _BASE_CONFIGS.clear()
    _registered = True


def load_recipe(schema_cls, path: Path):
    """A YAML option validated by its group's schema; an unknown key or a wrong type is one line naming the
    file and the key (omegaconf's own message is several lines and names only the schema)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    data = _load_yaml(path)
    try:
        return OmegaConf.merge(OmegaConf.structured(schema_cls), data)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or "?"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = ""
        if isinstance(exc, ConfigKeyError) and dataclasses.is_dataclass(schema_cls):
            hint = f" (known keys: {', '.join(f.name for f in dataclasses.fields(schema_cls))})"
        raise LzeBenchError(f"{path}: key {key!r}: {first}{hint}") from exc


def _load_yaml(path: Path):
    from omegaconf import OmegaConf

    try:
        return OmegaConf.load(path)
    except Exception as exc:  # a YAML syntax error: name the file
        raise LzeBenchError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc


def yaml_options(group: str) -> dict[str, Path]:
    """Option name -> YAML file for a YAML group (later folders win)."""
    options: dict[str, Path] = {}
    for folder_path in YAML_GROUPS[group].search_path():
        if folder_path.is_dir():
            for path in sorted(folder_path.glob("*.yaml")):
                options[path.stem] = path.resolve()
    options.update(_RECIPE_FILES.get(group, {}))
    return options


def group_options(group: str) -> list[str]:
    """Valid options of a config group."""
    register_all()
    if group in REGISTRY_GROUPS:
        return sorted(REGISTRY_GROUPS[group])
    if group in YAML_GROUPS:
        return sorted(yaml_options(group))
    return []


def compose(name: str, overrides: list[str] | tuple[str, ...] = ()):
    """Compose primary config `name` with Hydra overrides; validate; return a DictConfig."""
    register_all()
    if name not in CONFIGS:
        raise LzeBenchError(unknown_choice("command config", name, CONFIGS))
    overrides = rewrite_recipe_paths(rewrite_model_override(rewrite_logger_override(list(overrides))))
    # selector=MODULE:CLASS -> the plug-in's registered name
    overrides = importlib.import_module(SELECTOR_PLUGINS).rewrite_selector_paths(overrides)
    _check_group_choices(overrides)
    _refuse_hydra_keys(overrides)
    if name == "train":
        overrides = backend_trainer_defaults(overrides) + overrides
    cfg = _compose_from_base(name, overrides)
    if cfg is None:
        cfg = _hydra_compose(name, overrides)
    to_objects(cfg)  # runs every schema's __post_init__ (value checks)
    return cfg


def _hydra_compose(name: str, overrides: list[str]):
    """One `hydra.compose` of `name` with `overrides`; its errors become one line."""
    from hydra import compose as hydra_compose
    from hydra import initialize
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize(version_base=None, config_path=None):
        try:
            cfg = hydra_compose(config_name=name, overrides=overrides)
        except Exception as exc:  # hydra's messages are multi-line: make one line
            raise LzeBenchError(_one_line(exc, name, overrides)) from exc
        _refuse_added_keys(cfg, name, overrides)
    return cfg


def _compose_from_base(name: str, overrides: list[str]):
    """The config Hydra would compose, from a kept composition of the same config-group choices.

    Hydra composes in two phases: the config-group choices pick and merge the defaults list, then
    each plain `key=value` is applied in order with `OmegaConf.update(cfg, key, value, merge=True)`
    (its `ConfigLoaderImpl._apply_overrides_to_config`). A sweep composes one train config per grid
    point, and its points mostly share the group choices (one selector, many seeds), while each
    `hydra.compose` costs ~90 ms, a third of it deep-copying every stored config. So the first phase
    is composed once per (name, group choices) and kept; the second is repeated here on a copy of it.

    Only plain overrides take this path: `+`, `++`, `~`, `group@package`, sweeps and dict values
    return None, as does any override Hydra's parser or OmegaConf refuses, so that Hydra composes
    them itself (and its error, made one line, names what was wrong exactly as before).
    """
    import copy

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    split = _split_plain_overrides(overrides)
    if split is None:
        return None
    group_overrides, value_overrides = split
    key = (name, tuple(group_overrides))
    if key not in _BASE_CONFIGS:
        try:
            _BASE_CONFIGS[key] = _hydra_compose(name, group_overrides)
        except LzeBenchError:
            return None  # composed again with every override, for the message that names them
    cfg = copy.deepcopy(_BASE_CONFIGS[key])
    try:
        for override in value_overrides:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
    except OmegaConfBaseException:
        return None
    return cfg


def _split_plain_overrides(overrides: list[str]) -> tuple[list[str], list] | None:
    """(config-group overrides as given, parsed value overrides), or None if any is not plain `key=value`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    except Exception:
        return None
    groups = {*REGISTRY_GROUPS, *YAML_GROUPS}
    group_overrides, value_overrides = [], []
    for override in parsed:
        if override.type != OverrideType.CHANGE or override.package is not None or override.is_sweep_override():
            return None
        if override.key_or_group in groups:
            if not isinstance(override.value(), str):
                return None
            group_overrides.append(override.input_line)
        else:
            value_overrides.append(override)
    return group_overrides, value_overrides


def _refuse_hydra_keys(overrides: list[str]) -> None:
    """`hydra.run.dir=...` would compose silently and do nothing: Hydra only composes here."""
    for item in overrides:
        key = item.partition("=")[0].lstrip("+~")
        if key == "hydra" or key.startswith("hydra."):
            raise LzeBenchError(f"{key}: lze-bench composes its config with Hydra but is not a Hydra app, so "
                                "hydra.* keys do nothing; drop it (outputs go to run_dir= / sweep_dir=)")


def _refuse_added_keys(cfg, name: str, overrides: list[str]) -> None:
    """`+trainer.foo=1` adds a key no schema has, which nothing would read: refuse it.

    `+` stays valid where a schema holds a free-form map (a `Dict[str, ...]` field such as
    `launcher.additional_parameters`) and for config groups (`+group=option`).
    """
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    for item in overrides:
        raw = item.partition("=")[0]
        key = raw.lstrip("+")
        if raw == key or key in REGISTRY_GROUPS or key in YAML_GROUPS:
            continue
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        schema = OmegaConf.get_type(parent) if isinstance(parent, DictConfig) else None
        if schema is None or not dataclasses.is_dataclass(schema):
            continue  # a free-form map: any key may be added
        if leaf not in {f.name for f in dataclasses.fields(schema)}:
            message = _unknown_key_message(name, overrides, key)
            raise LzeBenchError(f"{raw}: {message}; '+' cannot add keys to {parent_key or 'the top level'} "
                                "(nothing would read them): use an existing key")


def backend_trainer_defaults(overrides: list[str]) -> list[str]:
    """`trainer.K=V` for a backend's own trainer defaults (its `trainer_defaults`) not set in `overrides`.

    The trainer schema's defaults fit the embedded tiny policy; a backend for
    real models (openrlhf) declares its own, applied before the user's overrides.
    """
    from lze_bench.registry import BACKENDS

    chosen = [o.partition("=")[2] for o in overrides if o.partition("=")[0].lstrip("+~") == "backend"]
    entry = BACKENDS.get(chosen[-1]) if chosen else None
    defaults = getattr(entry, "trainer_defaults", None) or {}
    given = {o.partition("=")[0].lstrip("+~") for o in overrides}
    return [f"trainer.{key}={value}" for key, value in defaults.items() if f"trainer.{key}" not in given]


def to_objects(cfg):
    """The config as dataclass instances; schema value errors become one line."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(cfg)
    except LzeBenchError:
        raise
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, LzeBenchError) else None
        if cause is not None:
            raise cause from exc
        raise LzeBenchError(str(exc).splitlines()[0]) from exc


def rewrite_model_override(overrides: list[str]) -> list[str]:
    """`model=X` with X not a preset means a path or hub id: `model=hf model.path=X`."""
    out = []
    presets = set(group_options("model"))
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key == "model" and value and value not in presets and "hf" in presets:
            out += ["model=hf", f"model.path={value}"]
        else:
            out.append(item)
    return out


def rewrite_logger_override(overrides: list[str]) -> list[str]:
    """`logger=wandb` or `logger=wandb,tensorboard` (verl's habit) means the list `logger=[...]`."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == "logger" and value and not value.startswith("["):
            item = f"{key}=[{value}]"
        out.append(item)
    return out


def rewrite_recipe_paths(overrides: list[str]) -> list[str]:
    """`sweep=path/to/grid.yaml` (or `eval=...`): a recipe file outside the recipe folders.

    The file becomes an option named after its stem (validated by the group's schema
    like any other); a missing file is an error naming the key.
    """
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key in YAML_GROUPS and value.endswith((".yaml", ".yml")):
            path = Path(value).expanduser()
            if not path.is_file():
                raise LzeBenchError(f"{key}={value}: no such recipe file (give an existing .yaml path or a name: "
                                    f"{', '.join(group_options(key))})")
            schema_cls = _load_attr(YAML_GROUPS[key].schema)
            node = load_recipe(schema_cls, path)
            ConfigStore.instance().store(group=key, name=path.stem, node=node)
            _BASE_CONFIGS.clear()  # an option of this name may have been composed from another file
            _RECIPE_FILES.setdefault(key, {})[path.stem] = path.resolve()
            item = f"{key}={path.stem}"
        out.append(item)
    return out


def _check_group_choices(overrides: list[str]) -> None:
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in REGISTRY_GROUPS and key not in YAML_GROUPS:
            continue
        choices = group_options(key)
        for option in value.split(","):  # multirun lists are checked option by option
            if not option.strip():  # `selector=` (or `a,,b`): Hydra would look for the file 'selector/'
                raise LzeBenchError(f"{item}: {key} needs a value (choices: {', '.join(choices) or 'none'})")
            if option not in choices:
                raise LzeBenchError(unknown_choice(key, option, choices))
            if option in _BROKEN_OPTIONS.get(key, {}):
                raise LzeBenchError(_BROKEN_OPTIONS[key][option])


def _one_line(exc: Exception, name: str, overrides: list[str]) -> str:
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    if first.startswith("Could not override '"):
        key = first.split("'")[1]
        return _unknown_key_message(name, overrides, key)
    if first.startswith("Error merging override") or first.startswith("Error parsing override"):
        cause = exc.__cause__
        detail = str(cause).splitlines()[0] if cause else first
        return f"{first.split(' ', 3)[-1]}: {detail}"
    if first.startswith("Ambiguous value for argument"):  # `key=a,b` outside a sweep
        item = first.split("'", 1)[1].rsplit("'", 1)[0]
        return (f"{item}: a comma list is a sweep over values, and {name} runs one: use "
                f"`lze-bench sweep {item}` (a list value is written key=[a,b], a string with a comma key='a,b')")
    if "Could not find" in first:
        return first.replace("In '" + name + "': ", "")
    return first


def _unknown_key_message(name: str, overrides: list[str], key: str) -> str:
    """`unknown key 'selector.keep_ratoi'; did you mean 'keep_ratio'? (keys: ...)`."""
    from hydra import compose as hydra_compose
    from omegaconf import DictConfig, OmegaConf

    groups_only = [o for o in overrides if o.partition("=")[0].lstrip("+~") in {*REGISTRY_GROUPS, *YAML_GROUPS}]
    try:
        base = hydra_compose(config_name=name, overrides=groups_only)
    except Exception:
        return f"unknown config key {key!r}"
    if key in REPLACED_KEYS:
        return f"{key} was replaced by {REPLACED_KEYS[key]}"
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(base, parent_key) if parent_key else base
    if not isinstance(parent, DictConfig):
        return f"unknown config key {key!r} ({parent_key or 'the top level'} has no sub-keys)"
    valid = [k for k in parent.keys() if k != "defaults"]
    import difflib

    near = difflib.get_close_matches(leaf, valid, n=1)
    hint = f"; did you mean {(parent_key + '.' if parent_key else '') + near[0]!r}?" if near else ""
    where = parent_key or "the top level"
    return f"unknown config key {key!r}{hint} (keys of {where}: {', '.join(valid)})"


def config_dict(cfg) -> dict:
    """A resolved config as plain Python containers (for config.yaml and hashing)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def env_data_root(cfg_root: str | None) -> str | None:
    """`data.root`, else env LZE_BENCH_DATA, else None (the Hugging Face hub)."""
    return cfg_root or env.data_root() or None
