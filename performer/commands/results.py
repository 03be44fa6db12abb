"""`performer results`: the results pages and README's findings, rendered from committed files."""

import dataclasses
import os

from performer.errors import UserError
from performer.flags import flag, folder
from performer.pages import render

NAME = "results"
SUMMARY = "render results/README.md, results/pages/ and README's findings from committed files"
DESCRIPTION = (
    "Renders every template under results/templates/ (Jinja): README.md.j2 into results/"
    "README.md, pages/NAME.md.j2 into results/pages/NAME.md, blocks/NAME.md.j2 between NAME's "
    "markers in README.md and docs/reproducing.md. A template prints numbers only through "
    "references to committed files (value, ratio, difference, count, table), verdicts only "
    "through verdict, verdicts and findings (worded from the claims files), and a paper's "
    "numbers only through quote(text, source). --check writes nothing: it exits 1 if a page "
    "differs from its render (a hand edit, or a file changed since) or if its prose holds a "
    "number that no reference printed.")


@dataclasses.dataclass(frozen=True)
class Flags:
  """What `performer results` renders."""
  repo: str = flag(".", "the repository's root (holds results/templates/)", parse=folder,
                   metavar="DIR")
  check: bool = flag(False, "write nothing; exit 1 on a stale page or an unreferenced number")
  only: tuple[str, ...] = flag((), "render only the outputs whose path contains one of these",
                               nargs="+", metavar="NAME")


FLAGS = (Flags,)


def main(args):
  """Renders (or checks) the pages; returns 1 when --check finds a problem."""
  repo = args.repo
  if args.check:
    stale = render.stale(repo, args.only)
    loose = render.unreferenced(repo, args.only)
    for path in stale:
      print(f"stale: {os.path.relpath(path, repo)} differs from its render "
            "(edit its template and run `performer results`)")
    for where, line, number in loose:
      print(f"unreferenced: {os.path.relpath(where, repo)}, line {line}: {number} (print it "
            "with value(...) from a committed file, or quote(text, source) from a paper)")
    if stale or loose:
      return 1
    read, quoted = render.numbers(repo)
    print(f"every output up to date; every number referenced ({read:,} read from files, "
          f"{quoted:,} quoted from papers)")
    return 0
  if not render.targets(repo):
    raise UserError(f"{repo}/results/templates holds no template")
  for path in render.write(repo, args.only):
    print(f"wrote {os.path.relpath(path, repo)}")
  return 0
