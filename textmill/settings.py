"""Settings, each defined once: a field of a dataclass declared with `setting(...)`, carrying its default,
type, range and help. Everything else is generated from the fields: the command-line options (the field
name with dashes), the TOML keys (the field name), the printed example config, and the checks, so a bad
value is one error line before any work, whether it came from a flag or from the run's TOML file.

A field's metadata:
    help      what it does (the flag's help and the example config's comment)
    least, most, above   its range: value >= least, <= most, > above (NaN is outside every range)
    old       spellings that keep working for one release with a deprecation note: "--flag" for the
              command line, a bare name for the TOML key
    key_name  the name it had in work-folder keys before a rename, so existing work folders stay valid
    keyed     False for what does not change the output (concurrency, workers) or is keyed by content
              (input files): left out of the output folder's key
    added     a setting added to a stage after work folders were keyed without it: in the key only when not
              at its default, so existing work folders stay valid
    nargs     "+" for Megatron's list options (--data-path A B); other lists are repeatable flags
    example   the value the example config shows for a field without a default
    group     the heading the option appears under in --help
"""

from __future__ import annotations

import argparse
import functools
import sys
import textwrap
import types
import typing
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from textmill.errors import TextmillError
from textmill.io.store import local_path

EXAMPLE_COMMENT_COLUMN, EXAMPLE_WIDTH = 29, 118  # where the example config's comments start, and its widest line
SEED_MAX = 2**32 - 1  # numpy's RandomState, which the shuffle, MinHash and the data index use, takes no more


def setting(default=MISSING, help: str = "", *, least=None, most=None, above=None, old: tuple[str, ...] = (),
            key_name: str | None = None, keyed: bool = True, added: bool = False, nargs: str | None = None, example=None,
            group: str | None = None) -> Any:
    """A dataclass field that is a user-facing setting (see the module docstring for the keywords)."""
    metadata = {"help": help, "least": least, "most": most, "above": above, "old": old, "key_name": key_name,
                "keyed": keyed, "added": added, "nargs": nargs, "example": example, "group": group}
    return field(default=default, metadata=metadata)


def check_ranges(obj) -> None:
    """Raise TextmillError naming the first field of the dataclass `obj` outside its declared range."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        least, most, above = (f.metadata.get(k) for k in ("least", "most", "above"))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if least is not None and not value >= least:
            raise TextmillError(f"{f.name} must be at least {least}, not {value}")
        if above is not None and not value > above:
            raise TextmillError(f"{f.name} must be more than {above}, not {value}")
        if most is not None and not value <= most:
            raise TextmillError(f"{f.name} must be at most {most}, not {value}")


def check_choices(obj) -> None:
    """Raise TextmillError naming the first Literal field of the dataclass `obj` holding another value."""
    for f in fields(obj):
        kind = kind_of(obj, f)
        if kind.choices and getattr(obj, f.name) not in kind.choices and not (kind.optional and getattr(obj, f.name) is None):
            raise TextmillError(f"{f.name} must be one of {', '.join(map(str, kind.choices))}, not {getattr(obj, f.name)!r}")


@dataclass(frozen=True)
class Settings:
    """A dataclass of settings whose ranges and choices are checked when it is built."""

    def __post_init__(self) -> None:
        check_ranges(self)
        check_choices(self)


class Kind(typing.NamedTuple):
    """What a field's annotation says about its values."""

    base: type  # int, float, str, bool or Path (of each item, for a list)
    many: bool  # a tuple of values
    optional: bool  # None allowed (and the default)
    choices: tuple = ()  # the values of a Literal


def kind_of(cls, f: Field) -> Kind:
    hint = type_hints(cls if isinstance(cls, type) else type(cls))[f.name]
    optional, many = False, False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = len(rest) < len(typing.get_args(hint)), rest[0]
    if typing.get_origin(hint) is tuple:
        many, hint = True, typing.get_args(hint)[0]
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return Kind(type(choices[0]), many, optional, choices)
    return Kind(hint, many, optional)


@functools.cache
def type_hints(cls: type) -> dict:
    """The annotations of a settings class, evaluated (once per class: typing does it slowly)."""
    return typing.get_type_hints(cls)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def has_default(f: Field) -> bool:
    return f.default is not MISSING


# --- the command line --------------------------------------------------------------------------------

class ArgumentDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default after its help, unless it has none to show (None) or its help already
    says what it is ("(default: the position count)")."""

    def _get_help_string(self, action):
        help = action.help or ""
        if action.default is None or action.default is argparse.SUPPRESS or "(default" in help:
            return help
        return super()._get_help_string(action)


def add_arguments(parser: argparse.ArgumentParser, cls, *, skip: tuple[str, ...] = (),
                  help_for: dict[str, str] | None = None) -> None:
    """One option per field of the dataclass `cls` (except `skip`): `--field-name`, its type, default and
    help from the field. `help_for` replaces a field's help for this command. A bool defaulting to False is a
    switch (`--x`); one defaulting to True has `--no-x` too. A field without a default is required."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in fields(cls):
        if f.name in skip:
            continue
        group = f.metadata.get("group")
        target = groups.setdefault(group, parser.add_argument_group(group)) if group else parser
        kind = kind_of(cls, f)
        options = dict(dest=f.name, help=(help_for or {}).get(f.name, f.metadata["help"]))
        if not has_default(f):
            options["required"] = True
        else:
            options["default"] = list(f.default) if kind.many else f.default
        if kind.base is bool:
            options["action"] = argparse.BooleanOptionalAction if f.default else "store_true"
        else:
            options["type"] = kind.base
            if kind.choices:
                options["choices"] = kind.choices
            if kind.many:
                if f.metadata.get("nargs"):
                    options["nargs"] = f.metadata["nargs"]
                else:  # repeatable; argparse appends to a default list, so these default to () (tested)
                    options["action"] = "append"
            if kind.base is Path or kind.many:
                options["metavar"] = "PATH" if kind.base is Path else f.name.upper().removesuffix("S")
        action = target.add_argument(flag(f.name), **options)
        for old in f.metadata.get("old", ()):
            if old.startswith("--"):
                options.update(action=deprecated(type(action), old, flag(f.name)), help=argparse.SUPPRESS, required=False)
                options.pop("metavar", None)
                target.add_argument(old, **options)


def deprecated(action_class: type, old: str, new: str) -> type:
    """`action_class` that first prints a one-line note that `old` is now spelled `new`."""

    class Deprecated(action_class):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"textmill: note: {old} is deprecated and goes in the next release; use {new}", file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


def from_namespace(cls, namespace: argparse.Namespace, **given):
    """An instance of `cls` from the options `add_arguments` made (lists become tuples), plus `given`."""
    values = dict(given)
    for f in fields(cls):
        if f.name not in values and hasattr(namespace, f.name):
            value = getattr(namespace, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def to_argv(cls, values: dict) -> list[str]:
    """The command-line options that give `values` (field name -> value, as from_table checked them), in
    the order given: the command a person would type, which a run's log shows (a process textmill starts is
    given its settings as a typed table file, never as options)."""
    argv: list[str] = []
    for name, value in values.items():
        f = next(f for f in fields(cls) if f.name == name)
        if isinstance(value, bool):
            argv += [flag(name)] if value else [flag("no_" + name)] if f.default is True else []
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        argv += [flag(name), *map(str, items)] if f.metadata.get("nargs") else [a for v in items for a in (flag(name), str(v))]
    return argv


# --- TOML tables ---------------------------------------------------------------------------------------

def from_table(cls, section: str, table: dict, base: Path, *, skip: dict[str, str] | None = None, **given) -> tuple[Any, dict]:
    """An instance of `cls` from the TOML table `[section]`, each value checked against its field's type
    (paths made absolute against `base`; "" is no path), plus `given`; and the table's values as checked,
    under the fields' names. `skip`: fields the table may not set, each with the reason. Unknown keys and
    old spellings are named; range errors name the section."""
    skip = skip or {}
    known = {f.name: f for f in fields(cls) if f.name not in skip}
    renamed = {old: f.name for f in known.values() for old in f.metadata.get("old", ()) if not old.startswith("--")}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in renamed:
            print(f"textmill: note: [{section}] {key} is deprecated and goes in the next release; use {renamed[key]}",
                  file=sys.stderr)
            key = renamed[key]
        if key in skip:
            raise TextmillError(f"[{section}] {key}: {skip[key]}")
        if key not in known:
            listed = f"fields: {', '.join(known)}" if len(known) <= 16 else "textmill run --example-config lists them"
            raise TextmillError(f"[{section}] has no field {key!r} ({listed})")
        values[key] = table_value(kind_of(cls, known[key]), value, f"[{section}] {key}", base)
    missing = [name for name, f in known.items() if not has_default(f) and name not in values and name not in given]
    if missing:
        raise TextmillError(f"[{section}] needs {missing[0]}")
    try:
        return cls(**values, **given), values
    except TextmillError as exc:  # the range and stage checks name the field, not the table
        raise TextmillError(f"[{section}] {exc}") from None


def to_table(obj, *, skip: tuple[str, ...] = ()) -> dict:
    """The table from_table reads back as the settings `obj` (paths as absolute text, tuples as lists, None
    left out): how a command hands its settings to the tasks it runs."""
    def plain(value):
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return str(value.expanduser().absolute()) if isinstance(value, Path) else value

    return {f.name: plain(getattr(obj, f.name)) for f in fields(obj)
            if f.name not in skip and getattr(obj, f.name) is not None}


def table_value(kind: Kind, value, where: str, base: Path):
    if kind.many:
        noun = {Path: "paths", str: "strings"}.get(kind.base, "numbers")
        if not isinstance(value, list) or (kind.base in (Path, str) and not all(isinstance(v, str) for v in value)):
            raise TextmillError(f"{where} must be a list of {noun}")
        if kind.base is Path:
            return tuple(resolve(v, base) for v in value)
        return tuple(table_value(kind._replace(many=False), v, f"{where}: each item", base) for v in value)
    if kind.base is Path:
        if not isinstance(value, str):
            raise TextmillError(f"{where} must be a path (a string)")
        return resolve(value, base) if value else None
    if kind.base is bool:
        if not isinstance(value, bool):
            raise TextmillError(f"{where} must be true or false")
    elif kind.base is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TextmillError(f"{where} must be a number")
        value = float(value)
    elif kind.base is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TextmillError(f"{where} must be a whole number")
    elif not isinstance(value, str):
        raise TextmillError(f"{where} must be a string")
    if kind.choices and value not in kind.choices:
        raise TextmillError(f"{where} must be one of {', '.join(map(str, kind.choices))}, not {value!r}")
    return value


def resolve(value: str, base: Path) -> Path:
    """A path made absolute against `base`; a URL (s3://bucket/key) is its local mirror (textmill.io.store)."""
    if "://" in value:
        try:
            return local_path(value)
        except ValueError as exc:
            raise TextmillError(str(exc)) from None
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def example_table(section: str, cls, *, skip: tuple[str, ...] = (), note: str = "") -> str:
    """The TOML table `[section]` with every field of `cls` (except `skip`) at its default and its help as
    a comment. A field without a default, or defaulting to None but for an alternative (train_iters, or
    train_samples), shows its example value; another whose default is None (which TOML cannot write) is
    shown commented out."""
    lines = [f"[{section}]"] + [f"# {line}" for line in note.splitlines()]
    for f in fields(cls):
        if f.name in skip:
            continue
        example = f.metadata.get("example")
        value = example if example is not None else f.default if has_default(f) else None
        text = f"# {f.name} =" if value is None and kind_of(cls, f).base is not Path else f"{f.name} = {toml_value(value)}"
        column = max(len(text) + 2, EXAMPLE_COMMENT_COLUMN)
        help = textwrap.wrap(f.metadata["help"], EXAMPLE_WIDTH - column - 2) or [""]
        lines.append(text.ljust(column) + "# " + help[0])
        lines += [" " * EXAMPLE_COMMENT_COLUMN + "# " + more for more in help[1:]]
    return "\n".join(lines) + "\n"


def reference_table(heading: str, cls, *, skip: tuple[str, ...] = (), command: str | None = None) -> str:
    """A Markdown table of every field of `cls` (except `skip`): its run-file key, its flag on `command` (if the
    table's settings are a command's too), its default and its help."""
    lines = [heading, "", "| key | flag | default | what it does |", "|---|---|---|---|"]
    for f in fields(cls):
        if f.name in skip:
            continue
        option = ""
        if command:
            option = f"`{flag(f.name)}`" + (f", `--no-{flag(f.name)[2:]}`" if f.default is True else "")
        default = "required" if not has_default(f) else "none" if f.default is None else f"`{toml_value(f.default)}`"
        lines.append(f"| `{f.name}` | {option} | {default} | {f.metadata['help'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if value is None:
        return '""'
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- work-folder keys ----------------------------------------------------------------------------------

def key_params(obj) -> dict:
    """The fields of the dataclass `obj` that change its stage's output, under their key names: what the
    stage's output folder is keyed by."""
    return {f.metadata.get("key_name") or f.name: getattr(obj, f.name) for f in fields(obj) if f.metadata.get("keyed", True)
            and not (f.metadata.get("added") and getattr(obj, f.name) == f.default)}


def settings_of(obj) -> dict:
    """Every field of the dataclass `obj` (what a manifest records)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}
