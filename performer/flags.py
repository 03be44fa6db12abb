"""Command-line flags built from typed configs: one dataclass field, one flag, one default.

`add` makes argparse arguments of a dataclass's `flag(...)` fields; `build` makes it back."""

import argparse
import dataclasses
import types
import typing

from performer.errors import UserError


def flag(default=dataclasses.MISSING, help="", *, name=None, parse=None, shown=None,  # pylint: disable=redefined-builtin
         positional=False, **argparse_kw):
  """A dataclass field that is also a command-line flag.

  Args:
    default: the field's default (dataclasses.MISSING: a required flag).
    help: what the flag does; "(default X)" is appended from `default`
      unless `shown` says otherwise.
    name: the flag, when not --field-name (e.g. "--input-scale"). A name
      with underscores (--gin_param, gin's own spelling) is offered dashed
      (--gin-param, the one help shows) and accepted as written too.
    parse: text -> value, for types the annotation does not name; may raise
      UserError or argparse.ArgumentTypeError. (As argparse does, a str
      default goes through it too.)
    shown: the default as the help states it ("" for none), when
      `default` itself does not read well (None meaning "the run's").
    positional: an argument without a leading --.
    **argparse_kw: passed to add_argument (choices, metavar, nargs, action).
  """
  metadata = {"help": help, "name": name, "parse": parse, "shown": shown,
              "positional": positional, "argparse": argparse_kw}
  if isinstance(default, (list, dict, set)):
    raise TypeError("flag defaults must be immutable (use a tuple)")
  return dataclasses.field(default=default, metadata={"flag": metadata})


def split(text, kind=str):
  """'a,b,c' -> ('a', 'b', 'c') converted by kind; '' -> ().

  Raises:
    argparse.ArgumentTypeError: an item that does not convert, an empty item
      ('a,,b': a typo, not a wish) or an item given twice.
  """
  noun = {int: "integers", float: "numbers"}.get(kind, "values")
  items = [x.strip() for x in text.split(",")] if text.strip() else []
  if "" in items:
    raise argparse.ArgumentTypeError(f"expected comma-separated {noun}, got an empty item in "
                                     f"'{text}'")
  try:
    values = tuple(kind(x) for x in items)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated {noun}, got '{text}'") from None
  twice = [x for i, x in enumerate(values) if x in values[:i]]
  if twice:
    raise argparse.ArgumentTypeError(f"{twice[0]} is given twice in '{text}'")
  return values


def folder(text):
  """A folder argument: '' (which os.path would read as the current folder) is refused."""
  if not text.strip():
    raise argparse.ArgumentTypeError("expected a folder, got an empty name")
  return text


def file(text):
  """A file argument: '' is refused by name, not reported as a missing file called ''."""
  if not text.strip():
    raise argparse.ArgumentTypeError("expected a file, got an empty name")
  return text


def binding(text):
  """A gin binding NAME=VALUE: an empty one is refused (it would be read as no binding at all)."""
  if not text.strip():
    raise argparse.ArgumentTypeError("expected a gin binding NAME=VALUE, got an empty one")
  return text


def add(parser, cls):
  """Adds an argument to `parser` for every flag field of dataclass `cls`."""
  for field in dataclasses.fields(cls):
    meta = field.metadata.get("flag")
    if meta is None:
      continue
    kw = dict(meta["argparse"])
    required = field.default is dataclasses.MISSING
    kind, many = _kind(field.type)
    if kind is bool:
      name = meta["name"] or "--" + ("no-" if field.default else "") + _dashed(field.name)
      kw.setdefault("action", "store_false" if field.default else "store_true")
    else:
      name = meta["name"] or "--" + _dashed(field.name)
      # nargs and append: argparse collects the words itself, one value each.
      many = many and "nargs" not in kw and kw.get("action") != "append"
      parse = meta["parse"] or (lambda text, k=kind, m=many: split(text, k) if m else k(text))
      kw.setdefault("type", _argument_type(parse, kind))
    shown = meta["shown"]
    if shown is None:
      shown = ("" if required or field.default is None or isinstance(field.default, bool)
               else _show(field.default))
    help_text = meta["help"] + (f" (default {shown})" if shown else "")
    help_text = help_text.replace("%", "%%")
    if meta["positional"]:
      parser.add_argument(field.name, help=help_text, **kw)
    else:
      default = None if required else field.default
      if kw.get("action") == "append":  # argparse appends to a copy of a list default
        if default:
          raise TypeError(f"{field.name}: an append flag's default must be empty")
        default = None if required else []
      if kind is not bool and "choices" not in kw:  # argparse shows the choices
        kw.setdefault("metavar", name.lstrip("-").replace("-", "_").upper())
      dashed = name.replace("_", "-")
      parser.add_argument(dashed, dest=field.name, required=required, default=default,
                          help=help_text, **kw)
      if dashed != name:  # the underscore spelling: accepted, not shown
        parser.add_argument(name, dest=field.name, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS, **kw)


def build(cls, args, **fields):
  """The dataclass `cls` from parsed `args` (its flag fields) and `fields` (the rest)."""
  values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if "flag" in f.metadata and f.name not in fields}
  values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}  # nargs, append
  return cls(**values, **fields)


def _dashed(name):
  return name.replace("_", "-")


def _kind(annotation):
  """(element type, whether a comma-separated tuple) of a field's annotation."""
  if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
    rest = [a for a in typing.get_args(annotation) if a is not type(None)]
    return _kind(rest[0]) if len(rest) == 1 else (None, False)
  if typing.get_origin(annotation) is tuple:
    element = typing.get_args(annotation)[0]
    return (element if element in (int, float, str) else None), True
  return annotation, False


def _argument_type(parse, kind):
  """`parse` as an argparse type: a UserError becomes argparse's one-line usage error."""
  def parsed(text):
    try:
      return parse(text)
    except UserError as e:
      raise argparse.ArgumentTypeError(str(e)) from None
  parsed.__name__ = getattr(kind, "__name__", "value")  # argparse's "invalid int value: 'x'"
  return parsed


def _show(value):
  if isinstance(value, tuple):
    return ",".join(_show(v) for v in value)
  if isinstance(value, float):
    return f"{value:g}"
  return str(value)


class Parser(argparse.ArgumentParser):
  """argparse whose errors are one line, as every other error of the command (no usage block:
  `--help` has it)."""

  def error(self, message):
    hint = " (`performer --help` lists the commands)" if self.prog == "performer" else ""
    self.exit(2, f"{self.prog}: error: {message}{hint}\n")


class Formatter(argparse.HelpFormatter):
  """Wraps text as usual, but keeps the lines of a text that has several (the figure list)."""

  def _fill_text(self, text, width, indent):
    if "\n" in text:
      return "".join(indent + line for line in text.splitlines(keepends=True))
    return super()._fill_text(text, width, indent)
