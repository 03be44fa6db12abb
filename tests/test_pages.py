"""The results pages: each is its template rendered from committed files, and no number is typed."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from performer.errors import UserError
from performer.pages import claims, refs, render
from testlib import ROOT


def _lines(problems):
  return "\n".join(f"{os.path.relpath(p, ROOT)}:{line}: {n}" for p, line, n in problems)


def test_every_committed_page_is_its_render():
  # A hand edit of a page, or a committed file changed since the page was rendered, fails here:
  # run `performer results` (after editing the template, never the page).
  assert render.stale(ROOT) == []


def test_every_number_in_the_pages_prose_is_read_from_a_file_or_quoted():
  assert not render.unreferenced(ROOT), _lines(render.unreferenced(ROOT))


def test_every_study_has_a_page_and_the_index_and_readme_are_rendered():
  outputs = {os.path.relpath(p, ROOT) for p in render.rendered(ROOT)}
  pages = {"approx_error", "estimators", "speed_cpu", "speed_gpu", "proteins", "appendix",
           "recall", "recall_conv", "recall_kv", "listops"}
  assert {f"results/pages/{p}.md" for p in pages} <= outputs
  assert {"results/README.md", "README.md", "docs/reproducing.md"} <= outputs


def _copy(tmp_path):
  """A repository beside the real one: its results/ links every entry but the templates, so
  that a test can edit one file and re-render."""
  repo = tmp_path / "repo"
  (repo / "results").mkdir(parents=True)
  (repo / "docs").mkdir()
  for name in os.listdir(os.path.join(ROOT, "results")):
    source = os.path.join(ROOT, "results", name)
    if name in ("templates", "pages", "README.md"):
      shutil.copytree(source, repo / "results" / name) if os.path.isdir(source) else \
          shutil.copy(source, repo / "results" / name)
    else:
      os.symlink(source, repo / "results" / name)
  for name in ("README.md", "docs/reproducing.md"):
    shutil.copy(os.path.join(ROOT, name), repo / name)
  return repo


def test_a_page_edited_by_hand_or_a_changed_file_is_caught(tmp_path):
  repo = _copy(tmp_path)
  assert render.stale(repo) == []
  page = repo / "results" / "pages" / "recall_conv.md"
  text = page.read_text()
  digit = re.search(r"\d", text[text.index("\n"):]).start() + text.index("\n")
  page.write_text(text[:digit] + "9" + text[digit:])  # one number edited by hand
  assert render.stale(repo) == [str(page)]
  page.write_text(text)
  # The claims behind the verdict sentences, one verdict changed: every page quoting it is stale.
  claims_csv = repo / "results" / "recall_conv_claims.csv"
  rows = open(claims_csv).read()
  claims_csv.unlink()
  claims_csv.write_text(rows.replace(",reproduced,", ",inconclusive,", 1))
  assert str(page) in render.stale(repo)


def test_performer_results_check_exits_1_on_a_stale_page_and_names_it(tmp_path):
  repo = _copy(tmp_path)
  page = repo / "results" / "pages" / "recall.md"
  page.write_text(page.read_text() + "\nA sentence typed by hand, 42% of it.\n")
  done = subprocess.run([sys.executable, "-m", "performer.cli", "results", "--repo", str(repo),
                         "--check"], capture_output=True, text=True, check=False)
  assert done.returncode == 1
  assert "stale: results/pages/recall.md" in done.stdout
  done = subprocess.run([sys.executable, "-m", "performer.cli", "results", "--repo",
                         str(tmp_path)], capture_output=True, text=True, check=False)
  assert done.returncode == 2 and "no such folder" in done.stderr
  assert "Traceback" not in done.stderr


def _lint(tmp_path, template, files=None):
  repo = tmp_path / "lint"
  (repo / "results" / "templates" / "pages").mkdir(parents=True)
  (repo / "docs").mkdir()
  (repo / "README.md").write_text("")
  (repo / "docs" / "reproducing.md").write_text("")
  for name, content in (files or {}).items():
    (repo / "results" / name).write_text(content)
  (repo / "results" / "templates" / "pages" / "t.md.j2").write_text(template)
  return render.unreferenced(repo), render.rendered(repo)[str(repo / "results/pages/t.md")]


def test_the_lint_flags_typed_numbers_and_passes_references_quotes_and_paper_parts(tmp_path):
  rows = [{"name": "a", "ms": 220.94}, {"name": "b", "ms": 283.3}]
  files = {"r.json": json.dumps({"created": "2026-11-30T07:15:02+00:00", "rows": rows})}
  problems, text = _lint(tmp_path, (
      "On {{ value('r.json', 'created', fmt='date') }}, a took "
      "{{ value('r.json', 'rows', 'name=a', 'ms', fmt='.1f') }} ms, "
      "{{ ratio('r.json', ['rows', 'name=a', 'ms'], ['rows', 'name=b', 'ms']) }} of b's; the paper "
      "says {{ quote('83.3%', 'Table 1') }} (Fig. 5, Figs. 5, 7 and 15, App. C.4, `m = 16`, "
      "float32, H200, [x](../f2.png)). Typed: 0.78 and 8 seeds.\n"), files)
  assert text.splitlines()[1] == (
      "On 2026-11-30, a took 220.9 ms, 0.78 of b's; the paper says 83.3% (Table 1) (Fig. 5, "
      "Figs. 5, 7 and 15, App. C.4, `m = 16`, float32, H200, [x](../f2.png)). Typed: 0.78 and 8 "
      "seeds.")
  assert [n for _, _, n in problems] == ["0.78", "8"]
  # Counted for a change's closing note: the date's year, 220.9 and 0.78 read; 83.3 quoted.
  assert render.numbers(tmp_path / "lint") == (3, 1)


def test_references_fail_loudly_on_a_missing_key_an_ambiguous_row_or_no_source(tmp_path):
  files = {"r.json": json.dumps({"rows": [{"name": "a", "ms": 1}, {"name": "a", "ms": 2}],
                                 "bad": float("nan")})}
  for template, message in (("{{ value('r.json', 'nope') }}", "no key 'nope'"),
                            ("{{ value('r.json', 'rows', 'name=a', 'ms') }}", "2 rows match"),
                            ("{{ value('r.json', 'bad', fmt='.2f') }}", "not a finite number"),
                            ("{{ value('gone.json', 'x') }}", "no such file"),
                            ("{{ quote('83.3%', '') }}", "name the source")):
    with pytest.raises(UserError, match=message):
      _lint(tmp_path / str(abs(hash(template))), template, files)


def test_formats_percentages_durations_and_integers():
  assert refs.formatted(0.98956, ".2%") == "98.96%"
  assert refs.formatted(9046, "duration") == "2 h 31 min"
  assert refs.formatted(250.4, "duration") == "4 min 10 s"
  assert refs.formatted(1.5, ".1f", scale=1000) == "1500.0"
  assert refs.formatted(1214101.0, ",d") == "1,214,101"
  assert refs.formatted("2026-12-06T00:12:37+00:00", "time") == "00:12"
  with pytest.raises(UserError, match="not an integer"):
    refs.formatted(2.5, "d")


def test_a_verdict_sentence_gives_the_rules_verdict_and_the_scope_it_was_decided_on():
  row = {"task": "L64_kv4", "claim": "Taylor matches exact", "paper": "p",
         "difference (pp)": "-1.20", "95% interval (pp)": "-3.10 .. +0.70", "MDE (pp)": "5.10",
         "delta (pp)": "4.82", "seeds": "3/3", "verdict": "inconclusive", "why": "w"}
  said = claims.sentence("recall_conv_claims.csv", row)
  assert said == ("Taylor matches exact: **inconclusive** on the MQAR test split, Zoology's layers "
                  "(short convolution), L = 64, kv = 4, 3/3 seeds (difference -1.20 pp, 95% "
                  "interval -3.10 .. +0.70 pp, margin +-4.82 pp; smallest difference these seeds "
                  "detect: 5.10 pp)")
  with pytest.raises(UserError, match="no declared scope"):
    claims.sentence("other_claims.csv", row)


def test_the_findings_table_has_one_row_per_paper_claim_and_every_committed_verdict():
  found = refs.References(os.path.join(ROOT, "results"))
  table = claims.findings(found)
  assert "| [recall_conv](results/pages/recall_conv.md) |" in table
  for path in claims.SCOPES:
    for row in found.raw(path):
      assert f"{row['claim']}: **{row['verdict']}**" in table, (path, row["claim"])
