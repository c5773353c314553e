"""How a command line reaches a command: overrides, the config panel of `--help`, Tab completion.

Typer owns argv; Hydra only composes. A command that takes configuration
(`train`, `eval`, `replay`, the `sweep` group) gets its trailing arguments
through `overrides(ctx)`, which refuses anything that is not a `KEY=VALUE`
override in one line (a mistyped `--dryrun`, Hydra's `-m`, a bare word) before
Hydra would read it as a malformed override. `ConfigCommand` adds the command's
config groups, their options and its other keys to `--help`, and completes
overrides on Tab, both read from the config store (config/help.py).
"""

from __future__ import annotations

import difflib

import typer
from typer.core import TyperCommand, TyperGroup

try:  # the click that typer runs on: recent typer (0.29 here) vendors its own copy as typer._click
    from typer._click.core import Command as ClickCommand
    from typer._click.exceptions import UsageError
    from typer._click.shell_completion import CompletionItem
except ImportError:  # older typer runs on click itself
    from click import Command as ClickCommand
    from click import UsageError
    from click.shell_completion import CompletionItem

from lze_bench import env
from lze_bench.errors import LzeBenchError


class ConfigHelp:
    """A command taking Hydra overrides: `--help` lists its config groups and keys, Tab completes them.

    Both are read from the config store (config/help.py), never from a list kept here.
    """

    def format_help(self, ctx, formatter) -> None:
        super().format_help(ctx, formatter)
        from lze_bench.config.help import help_rows

        rows = help_rows(self.name)
        if getattr(self, "rich_markup_mode", None) is None:
            with formatter.section("Config (KEY=VALUE arguments)"):
                formatter.write_dl(rows)
            return
        from rich.console import Console
        from rich.markup import escape
        from rich.panel import Panel
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for left, right in rows:
            table.add_row(escape(left), escape(right))
        Console().print(Panel(table, title="Config (KEY=VALUE arguments)", title_align="left", border_style="dim"))

    def shell_complete(self, ctx, incomplete: str):
        items = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            return items
        from lze_bench.config.help import complete_override

        return items + [CompletionItem(value) for value in complete_override(self.name, list(ctx.args), incomplete)]


class ConfigCommand(ConfigHelp, TyperCommand):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.options_metavar = "[OPTIONS] [KEY=VALUE]..."


HYDRA_MULTIRUN = ("-m", "--multirun")


def overrides(ctx: typer.Context) -> list[str]:
    """The trailing arguments, which must all be overrides: a stray option is a one-line error here,
    not a Hydra parse error about a `--dry-run` typed as `--dryrun`."""
    command = f"lze-bench {ctx.info_name}"
    for arg in ctx.args:
        if not arg.startswith("-"):
            if "=" not in arg and not arg.startswith("~"):  # `~key` deletes a key; anything else sets one
                raise LzeBenchError(f"{command}: {arg!r} is neither an option nor a KEY=VALUE override "
                                    f"(see {command} --help)")
            continue
        name = arg.partition("=")[0]
        if name in HYDRA_MULTIRUN:
            if ctx.command.name == "sweep":
                raise LzeBenchError(f"{command}: {name} is Hydra's multirun flag and not needed here: comma lists "
                                    "make the grid (lze-bench sweep selector=uniform,lze seed=0,1)")
            raise LzeBenchError(f"{command}: {name} (Hydra's multirun) is not an option: {command} runs one config; "
                                "for a grid use lze-bench sweep selector=uniform,lze seed=0,1")
        options = sorted({opt for param in ctx.command.params for opt in param.opts if opt.startswith("--")}
                         | {"--help"})
        near = difflib.get_close_matches(name, options, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise LzeBenchError(f"{command}: no such option {name}{hint} (options: {', '.join(options)}; "
                            "other arguments are KEY=VALUE, without dashes)")
    return list(ctx.args)


class OverridesOrCommandGroup(ConfigHelp, TyperGroup):
    """A group whose arguments are either a sub-command or Hydra overrides for the group itself.

    `lze-bench sweep status DIR` runs the `status` sub-command; `lze-bench sweep
    sweep=NAME --dry-run` (first argument not a sub-command's name) parses like a
    plain command: options may come anywhere and every other argument reaches
    the group's callback as an override. A sub-command's usage mistake (a bad
    `--every`, a missing DIR) prints one line and exits 2, like LzeBenchError.
    """

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            return super().parse_args(ctx, args)
        ctx.allow_interspersed_args = True  # a group stops parsing options at the first argument; a command does not
        return ClickCommand.parse_args(self, ctx, args)

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            if env.debug() or exc.ctx is None or exc.ctx.command is self:
                raise
            typer.echo(f"error: {exc.ctx.command_path}: {' '.join(exc.format_message().split())} "
                       f"(see {exc.ctx.command_path} --help)", err=True)
            raise typer.Exit(code=2) from None
