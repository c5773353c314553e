"""Selectors from outside the package: `selector=MODULE:CLASS` and the `lze_bench.selectors` entry points.

A plug-in is a class derived from `lze_bench.api.Selector` with a `Config` dataclass. Two ways in:

* an import path on the command line, `selector=mypkg.band:BandSelector` (any importable module; the
  current directory is put on `sys.path` first, so a `band.py` beside the user works as `band:BandSelector`);
* an entry point in an installed distribution's pyproject.toml, loaded by every command that composes a
  config and by `lze-bench selectors`:

      [project.entry-points."lze_bench.selectors"]
      band = "band_selector:BandSelector"

Its name, which the ledger, the run directory, tables and figure legends show: the entry point's name;
for an import path, the class's own `name` attribute when it sets one, else the CLASS part as written.

Registration: the class is registered under that name (`lze_bench.registry.SELECTORS`) as a subclass
whose `Config` is the plug-in's dataclass plus two recorded fields, so `selector.KEY=VALUE`, `--cfg`
and the one-line errors for unknown keys and bad values work as for a built-in:

    plugin          "module:Class" it was loaded from
    plugin_version  "<distribution> <version>, sha256:<16 hex>" or "sha256:<16 hex>" of the class's
                    module file: a changed plug-in changes the run's config, so a resume of a run made
                    with the old one is refused like any changed config (a new default run directory)

Other processes: `selector_class(cfg.selector)` is every backend process's lookup by name; a process that
did not compose the config (OpenRLHF's driver and its Ray trainer actor) registers the plug-in there from
the recorded `plugin`. `worker_pythonpath` gives the PYTHONPATH for Ray workers, which start in another
directory: the caller's plus the folder a module file was imported from, checked in a fresh interpreter.

Refused in one line: a path that does not import, a class that is not a selector, a name that
shadows a built-in, two plug-ins with one name, an incompatible `lze_bench_api` (lze_bench.api).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from lze_bench.errors import LzeBenchError

ENTRY_POINT_GROUP = "lze_bench.selectors"
RECORDED_FIELDS = ("plugin", "plugin_version")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered plug-in came from."""

    name: str
    target: str  # "module:Class"
    version: str  # the recorded plugin_version
    distribution: str = ""  # "band-selector 0.1.0" when an installed distribution holds it
    entry_point: bool = False

    def origin(self) -> str:
        where = f"module {self.target.partition(':')[0]}"
        if self.distribution:
            where += f", distribution {self.distribution}"
        return where + (" (entry point)" if self.entry_point else " (import path)")


PLUGINS: dict[str, PluginInfo] = {}
_BY_CLASS: dict[type, str] = {}  # the plug-in class -> its registered name (a class loaded twice is one plug-in)
_entry_points_loaded = False


def is_import_path(value: str) -> bool:
    return ":" in str(value)


def builtin_names() -> set[str]:
    import lze_bench.selectors  # noqa: F401  (registers the built-ins)
    from lze_bench.registry import SELECTORS

    return {name for name in SELECTORS if name not in PLUGINS}


def load_entry_points() -> None:
    """Register every `lze_bench.selectors` entry point of the installed distributions (once per process)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    from importlib.metadata import entry_points

    _entry_points_loaded = True
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: (p.name, p.value)):
        dist = getattr(point, "dist", None)
        label = f"entry point {point.name} = {point.value!r}" + (f" of {dist.name}" if dist else "")
        try:
            cls = point.load()
        except Exception as exc:  # any error of someone else's import: one line naming the entry point
            raise LzeBenchError(f"selector plug-in {label} does not import ({_first_line(exc)}); fix or "
                                "uninstall that distribution") from exc
        distribution = f"{dist.name} {dist.version}" if dist else ""
        register(cls, point.name, target=point.value, where=label, distribution=distribution, entry_point=True)


def load_import_path(spec: str) -> str:
    """Import `module:Class`, register it, and return its name."""
    module_name, _, class_name = str(spec).partition(":")
    where = f"selector={spec}"
    if not module_name or not class_name or ":" in class_name:
        raise LzeBenchError(f"{where}: write an import path as MODULE:CLASS, e.g. selector=mypkg.band:BandSelector")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # `lze-bench` scripts do not put the current directory there
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ModuleNotFoundError, or any error the module raises while importing
        raise LzeBenchError(f"{where}: module {module_name!r} does not import ({_first_line(exc)}); give a "
                            f"module on sys.path or a {module_name.split('.')[0]}.py in {cwd}") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise LzeBenchError(f"{where}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no "
                            f"{class_name!r}")
    _require_selector(cls, f"{module_name}:{class_name}", where)
    if cls in _BY_CLASS:
        return _BY_CLASS[cls]
    declared = _declared_name(cls)
    name = declared or class_name
    distribution = _distribution_of(module_name)
    return register(cls, name, target=f"{module_name}:{class_name}", where=where, distribution=distribution)


def register(cls, name: str, *, target: str, where: str, distribution: str = "", entry_point: bool = False) -> str:
    """Check `cls` and register it as selector `name`; returns the name."""
    from lze_bench.api import check_api_version
    from lze_bench.registry import SELECTORS

    _require_selector(cls, target, where)
    if _BY_CLASS.get(cls) == name:
        return name
    config = getattr(cls, "Config", None)
    if not (inspect.isclass(config) and dataclasses.is_dataclass(config)):
        raise LzeBenchError(f"{where}: {target} has no Config dataclass (class attribute Config = a @dataclass "
                            "whose fields all have defaults)")
    check_api_version(getattr(cls, "lze_bench_api", None), f"{where}: {target}")
    if not _NAME.match(name):
        raise LzeBenchError(f"{where}: selector name {name!r} must be letters, digits, '_' or '-' (it names run "
                            "directories and table rows)")
    if name in builtin_names():
        raise LzeBenchError(f"{where}: {target} is named {name!r}, the name of a built-in selector; give it "
                            "another name (its class attribute `name`, or the entry point's name)")
    if name in PLUGINS:
        raise LzeBenchError(f"{where}: two selector plug-ins are named {name!r}: {PLUGINS[name].target} "
                            f"({PLUGINS[name].origin()}) and {target}; rename one")
    version = _version(cls, distribution)
    registered = _registered_class(cls, name, target, version, where)
    SELECTORS[name] = registered
    PLUGINS[name] = PluginInfo(name, target, version, distribution, entry_point)
    _BY_CLASS[cls] = name
    _store(name, registered.Config)
    return name


def ensure_registered(selector_cfg) -> None:
    """Register the plug-in a composed selector config names, in a process that has not loaded it yet."""
    from lze_bench.registry import SELECTORS

    name = selector_cfg.get("name") if hasattr(selector_cfg, "get") else getattr(selector_cfg, "name", None)
    if name in SELECTORS:
        return
    load_entry_points()
    target = selector_cfg.get("plugin") if hasattr(selector_cfg, "get") else getattr(selector_cfg, "plugin", None)
    if name not in SELECTORS and target:
        load_import_path(str(target))


def selector_class(selector_cfg) -> type:
    """The registered class of a composed selector config: every backend process's one lookup by name.

    A process that did not compose the config (the OpenRLHF driver, its Ray actors, a replay) registers
    the plug-in first from the config's recorded `plugin` ("module:Class") or the installed entry points.
    """
    from lze_bench.registry import SELECTORS

    import lze_bench.selectors  # noqa: F401  (the built-ins are registered before a plug-in's name is checked)

    ensure_registered(selector_cfg)
    name = selector_cfg.get("name") if hasattr(selector_cfg, "get") else getattr(selector_cfg, "name", None)
    return SELECTORS[name]


def import_root(name: str) -> Path | None:
    """The folder a process started elsewhere (a Ray worker, in another directory) needs on its path to import
    plug-in `name`'s module; None for a built-in or a plug-in of an installed distribution, which every process
    of this Python finds in its site-packages. Refused in one line when the module has no file to import."""
    info = PLUGINS.get(name)
    if info is None or info.distribution:
        return None
    module_name = info.target.partition(":")[0]
    source = getattr(sys.modules.get(module_name), "__file__", None)
    if not source:
        raise LzeBenchError(f"selector plug-in {name} ({info.target}): module {module_name!r} has no file another "
                            "process could import (defined in the running program?); put it in a module file")
    root = Path(source).resolve().parent
    if Path(source).stem == "__init__":
        root = root.parent  # a package's folder sits in its root
    for _ in module_name.split(".")[1:]:
        root = root.parent
    return root


def worker_pythonpath(selector_cfg, pythonpath: str | None) -> str | None:
    """The PYTHONPATH for processes that build the selector elsewhere (Ray workers): `pythonpath` plus the
    plug-in's import root (appended: the user's own entries keep their precedence). Ray puts a local driver's
    current directory on its workers' path itself, but not for a client (`ray://`) driver or a runtime env with
    a working_dir; this entry holds either way. Checked by finding the
    module in a fresh interpreter with that path, started outside the current directory; refused in one line
    naming the plug-in and why when it is not found there, or another module of that name is."""
    name = selector_cfg.get("name") if hasattr(selector_cfg, "get") else getattr(selector_cfg, "name", None)
    root = import_root(name)
    if root is None:
        return pythonpath
    entries = [entry for entry in (pythonpath or "").split(os.pathsep) if entry]
    if str(root) not in entries:
        entries.append(str(root))
    joined = os.pathsep.join(entries)
    _check_found_elsewhere(PLUGINS[name], joined)
    return joined


_FOUND: dict[tuple[str, str], str] = {}  # (module, PYTHONPATH) -> where a fresh interpreter finds it ("" nowhere)


def _check_found_elsewhere(info: PluginInfo, pythonpath: str) -> None:
    import subprocess
    import tempfile

    from lze_bench import env

    module_name = info.target.partition(":")[0]
    key = (module_name, pythonpath)
    if key not in _FOUND:
        probe = ("import importlib.util, sys\nspec = importlib.util.find_spec(sys.argv[1])\n"
                 "print(spec.origin if spec and spec.origin else '')")
        done = subprocess.run([sys.executable, "-c", probe, module_name], capture_output=True, text=True,
                              cwd=tempfile.gettempdir(), env=env.child_env({env.PYTHONPATH: pythonpath}))
        _FOUND[key] = done.stdout.strip() if done.returncode == 0 else ""
    found = _FOUND[key]
    here = str(Path(sys.modules[module_name].__file__).resolve())
    if not found:
        why = f"a fresh Python with PYTHONPATH={pythonpath} does not find module {module_name!r}"
    elif str(Path(found).resolve()) != here:
        why = f"they would import module {module_name!r} from {found}, not {here}"
    else:
        return
    raise LzeBenchError(f"selector plug-in {info.name} ({info.target}) cannot be imported by the Ray workers: {why}; "
                        "install it as a distribution, or rename the module")


def rewrite_selector_paths(overrides: list[str]) -> list[str]:
    """`selector=MODULE:CLASS` (also in a sweep's comma list) -> `selector=NAME` of the registered plug-in."""
    load_entry_points()  # first: an import path may not take an installed plug-in's name
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+~") == "selector" and is_import_path(value):
            value = value.replace("\\:", ":")  # a sweep's grid escapes ':' for Hydra's override grammar
            value = ",".join(load_import_path(option) if is_import_path(option) else option
                             for option in _split_options(value))
            item = f"{key}={value}"
        out.append(item)
    return out


def _split_options(value: str) -> list[str]:
    """`a,mod:Cls` -> ["a", "mod:Cls"]; a Hydra sweep's `choice(...)` or list is left alone."""
    return value.split(",") if not value.startswith(("[", "choice(")) else [value]


def _registered_class(cls, name: str, target: str, version: str, where: str) -> type:
    """A subclass of `cls` named `name` whose Config records where the plug-in came from."""
    base_config = cls.Config
    taken = [f.name for f in dataclasses.fields(base_config) if f.name in RECORDED_FIELDS]
    if taken:
        raise LzeBenchError(f"{where}: {target}'s Config has a field {taken[0]!r}, which lze-bench records itself; "
                            "rename it")
    missing = [f.name for f in dataclasses.fields(base_config)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise LzeBenchError(f"{where}: {target}'s Config field {missing[0]!r} has no default; give every field one")

    def __post_init__(self):
        if hasattr(base_config, "__post_init__"):
            base_config.__post_init__(self)
        for key, expected in (("plugin", target), ("plugin_version", version)):
            if getattr(self, key) != expected:
                raise LzeBenchError(f"selector.{key}: recorded by lze-bench ({expected!r}), not set; drop the "
                                    "override")

    config = dataclasses.make_dataclass(
        base_config.__name__,
        [("name", str, dataclasses.field(default=name)),
         ("plugin", str, dataclasses.field(default=target)),
         ("plugin_version", str, dataclasses.field(default=version))],
        bases=(base_config,), namespace={"__post_init__": __post_init__, "__doc__": base_config.__doc__})
    config.__module__ = base_config.__module__
    return type(cls.__name__, (cls,), {"Config": config, "name": name, "__module__": cls.__module__,
                                       "__doc__": cls.__doc__, "__qualname__": cls.__qualname__})


def _require_selector(cls, target: str, where: str) -> None:
    from lze_bench.api import Selector

    if not (inspect.isclass(cls) and issubclass(cls, Selector)):
        raise LzeBenchError(f"{where}: {target} is {_describe(cls)}, not a selector (a class derived from "
                            "lze_bench.api.Selector)")


def _store(name: str, config: type) -> None:
    """Put the config in Hydra's store beside the built-ins' (lze_bench.config.register_all stores those)."""
    from hydra.core.config_store import ConfigStore

    from lze_bench.config import forget_compositions

    ConfigStore.instance().store(group="selector", name=name, node=config)
    forget_compositions()  # a composition kept from before would carry the plug-in's old config (its version)


def _declared_name(cls) -> str | None:
    """The `name` a class sets itself or inherits from another plug-in class (not lze-bench's "base")."""
    for klass in cls.__mro__:
        if klass.__module__.startswith("lze_bench."):
            return None
        if "name" in vars(klass) and isinstance(vars(klass)["name"], str):
            return vars(klass)["name"]
    return None


def _version(cls, distribution: str) -> str:
    source = inspect.getsourcefile(cls) or getattr(sys.modules.get(cls.__module__), "__file__", None)
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16] if source else "unknown"
    return f"{distribution}, sha256:{digest}" if distribution else f"sha256:{digest}"


def _distribution_of(module_name: str) -> str:
    """"name version" of the installed distribution that provides the module's top-level package, or ""."""
    from importlib.metadata import packages_distributions, version

    names = packages_distributions().get(module_name.split(".")[0], [])
    return f"{names[0]} {version(names[0])}" if names else ""


def _describe(obj) -> str:
    return f"class {obj.__qualname__}" if inspect.isclass(obj) else f"a {type(obj).__name__}"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
