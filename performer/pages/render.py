"""The results pages, rendered from results/templates/ and the committed files (`targets` maps
each template to its output; a block fills the span between its markers in BLOCK_FILES)."""

import os
import re

import jinja2

from performer.atomic import atomic_path
from performer.errors import UserError
from performer.pages import claims, refs

BLOCK_FILES = ("README.md", "docs/reproducing.md")
BEGIN = ("<!-- begin {name}: rendered by `performer results` from "
         "results/templates/blocks/{name}.md.j2 -->")
END = "<!-- end {name} -->"
HEADER = ("<!-- rendered by `performer results` from results/templates/{template}: edit the "
          "template, not this file -->\n")

# A number in prose: a digit run not glued to a word (float32, H200, PG-19 and kv4 are names).
NUMBER = re.compile(r"(?<![\w.+-])[-+]?\d[\d,]*(?:\.\d+)?(?![\w])")
# Numbers that name a part of a paper, never a measurement: "Fig. 5", "Table 2", "App. C.4",
# "Sec. 4.3", "Eq. 7", "Figs. 5, 7 and 15".
STRUCTURAL = re.compile(
    r"\b(?:Figs?\.|Figures?|Tables?|Eqs?\.|Equations?|Lemmas?|Theorems?|Secs?\.|Sections?|"
    r"App\.|Appendix|Appendices|Algorithm)\s*[A-D]?\d+(?:\.\d+)*"
    r"(?:\s*(?:,|and|/|-|or)\s*[A-D]?\d+(?:\.\d+)*)*"
    r"|\b95% interval")  # the rule's declared confidence level (verdicts.ALPHA), a setting
# What the lint does not read: code (commands, paths, identifiers), link targets, comments.
NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)]*\)|<!--.*?-->", re.S)


def targets(repo):
  """[(template name under results/templates, output path or (block file, block name))]."""
  base = os.path.join(repo, "results", "templates")
  if not os.path.isdir(base):
    raise UserError(f"{base}: no such folder (run from the repository's root, or pass --repo)")
  found = []
  for folder, _, files in sorted(os.walk(base)):
    for name in sorted(files):
      if not name.endswith(".md.j2"):
        continue
      template = os.path.relpath(os.path.join(folder, name), base)
      stem = name.removesuffix(".md.j2")
      if template == "README.md.j2":
        found.append((template, os.path.join(repo, "results", "README.md")))
      elif template.startswith("pages" + os.sep):
        found.append((template, os.path.join(repo, "results", "pages", stem + ".md")))
      elif template.startswith("blocks" + os.sep):
        found.append((template, ("block", stem)))
  return found


def environment(repo, lint=False):
  """A Jinja environment over results/templates whose globals read results/ (refs, claims)."""
  env = jinja2.Environment(
      loader=jinja2.FileSystemLoader(os.path.join(repo, "results", "templates")),
      undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
  found = refs.References(os.path.join(repo, "results"), lint=lint)
  env.globals.update(found.globals())
  env.filters["num"] = found.num
  for name in ("verdict", "verdicts", "findings"):
    env.globals[name] = (lambda f: lambda *a, **k: f(found, *a, **k))(getattr(claims, name))
  return env


def _chosen(template, target, only):
  names = [template] + ([target] if isinstance(target, str) else [])
  return not only or any(o in n for o in only for n in names)


def pieces(repo, lint=False, only=()):
  """[(output path, block name or None, rendered text)] for every template (those whose
  template name or output path contains one of `only`, when given)."""
  env, out = environment(repo, lint), []
  for template, target in targets(repo):
    if not _chosen(template, target, only):
      continue
    try:
      text = env.get_template(template).render()
    except jinja2.TemplateError as e:
      raise UserError(f"results/templates/{template}: {e}") from None
    if isinstance(target, str):
      out.append((target, None, HEADER.format(template=template) + text))
    else:
      out += [(os.path.join(repo, host), target[1], text) for host in BLOCK_FILES]
  return out


def rendered(repo, only=()):
  """{output path: its full text}; a block's output is its whole host file, filled."""
  out = {}
  for path, block, text in pieces(repo, only=only):
    out[path] = text if block is None else _fill(out.get(path) or _read(path), block, text, path)
  return out


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def _fill(whole, name, text, path):
  """whole with the span between name's markers replaced by text (unchanged without markers)."""
  begin, end = BEGIN.format(name=name), END.format(name=name)
  if begin not in whole:
    return whole
  if whole.count(begin) != 1 or end not in whole.split(begin, 1)[1]:
    raise UserError(f"{path}: block {name!r} needs one {begin!r} followed by {end!r}")
  head, rest = whole.split(begin, 1)
  return head + begin + "\n" + text.strip("\n") + "\n" + end + rest.split(end, 1)[1]


def stale(repo, only=()):
  """The outputs whose committed text differs from a fresh render (hand edits, old renders),
  among those whose path contains one of `only` (all when empty)."""
  return sorted(path for path, text in rendered(repo, only).items()
                if not os.path.exists(path) or _read(path) != text)


def unreferenced(repo, only=()):
  """[(output, line number, the number)] for every number in the rendered prose that no
  reference printed and that is not a paper's part (Fig. 5) or in code or a link."""
  problems = []
  for path, block, text in pieces(repo, lint=True, only=only):
    if block is not None and BEGIN.format(name=block) not in _read(path):
      continue  # a host without this block
    prose = re.sub(f"[{refs.MARK}{refs.QUOTED}].*?{refs.END}",
                   lambda m: "\n" * m[0].count("\n"), text, flags=re.S)
    prose = NOT_PROSE.sub(lambda m: "\n" * m[0].count("\n"), prose)
    for i, line in enumerate(prose.splitlines(), 1):
      line = STRUCTURAL.sub("", line)
      where = path if block is None else f"{path} (block {block})"
      problems += [(where, i, m[0]) for m in NUMBER.finditer(line)]
  return problems


def numbers(repo):
  """(numbers printed by references, numbers quoted from papers) over every output's prose:
  what the closing count of a change reports."""
  read = quoted = 0
  for _, _, text in pieces(repo, lint=True):
    text = NOT_PROSE.sub("", text)
    for span in re.findall(f"[{refs.MARK}{refs.QUOTED}][^{refs.END}]*{refs.END}", text):
      found = len(NUMBER.findall(STRUCTURAL.sub("", span[1:-1])))
      read, quoted = (read, quoted + found) if span[0] == refs.QUOTED else (read + found, quoted)
  return read, quoted


def write(repo, only=()):
  """Writes every stale output (those whose name contains one of `only`); returns their paths."""
  texts = rendered(repo, only)
  changed = []
  for path in stale(repo, only):
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
      f.write(texts[path])
    changed.append(path)
  return changed
