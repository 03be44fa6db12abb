"""Project Gutenberg books as PG-19 distributes them: a folder's books listed, read and cleaned.

Cleaned text is UTF-8 with LF line ends and without the Gutenberg header and footer."""

import csv
import hashlib
import os
import re
import shutil
import tempfile

from performer.data import outdir
from performer.errors import UserError

SPLITS = {"train": "train", "valid": "validation", "test": "test"}  # ours -> PG-19's folder
_START = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG.*$", re.M)
_END = re.compile(r"^\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG.*$", re.M)


def clean_text(raw, name):
  """bytes of a book -> text: UTF-8, no BOM, LF line ends, no Gutenberg header/footer.

  Raises:
    UserError: the bytes are not UTF-8.
  """
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise UserError(f"{name}: not UTF-8 text (byte {e.start})") from None
  text = text.replace("\r\n", "\n").replace("\r", "\n")
  start, end = _START.search(text), _END.search(text)
  if start:
    text = text[start.end():]
    end = _END.search(text)
  if end:
    text = text[:end.start()]
  return text.strip("\n") + "\n"


def list_books(folder):
  """{split: sorted .txt paths} of a PG-19 folder, checked before any work.

  Raises:
    UserError: a missing split folder or one without books.
  """
  books = {}
  for split, name in SPLITS.items():
    path = os.path.join(folder, name)
    if not os.path.isdir(path):
      raise UserError(f"{folder}: no {name}/ folder (expected PG-19's train/, validation/ "
                      "and test/)")
    books[split] = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".txt"))
    if not books[split]:
      raise UserError(f"{path}: no .txt books")
  return books


def read_books(paths, digests=None, skipped=None):
  """Yields (book id, cleaned text) of each path.

  Args:
    paths: book files.
    digests: if a list, gets the `outdir.file_stat` of each book (all of
      them, skipped ones too) plus "name" and "sha256".
    skipped: if a list, books that are not UTF-8 are appended to it and left
      out; if None, they raise.

  Raises:
    UserError: an unreadable book, or one that is not UTF-8 (without
      `skipped`), naming it.
  """
  for path in paths:
    entry = outdir.file_stat(path)
    try:
      with open(path, "rb") as f:
        raw = f.read()
    except OSError as e:
      raise UserError(f"{path}: {e.strerror}") from None
    if digests is not None:
      digests.append({"name": os.path.basename(path), **entry, "bytes": len(raw),
                      "sha256": hashlib.sha256(raw).hexdigest()})
    try:
      text = clean_text(raw, path)
    except UserError:
      if skipped is None:
        raise
      skipped.append(path)
      continue
    yield os.path.basename(path)[:-4], text


def read_tfds_books(split, skipped=None):
  """Yields (book id, text) from tensorflow-datasets' pg19 (the `tfds` extra); see read_books."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise UserError("the tfds source needs tensorflow-datasets; from the project folder run: "
                    ".venv/bin/pip install -e '.[tfds]'") from None
  for example in tfds.as_numpy(tfds.load("pg19", split=SPLITS[split])):
    book = example["book_id"]
    book = book.decode() if isinstance(book, bytes) else str(book)
    try:
      text = clean_text(example["book_text"], f"tfds pg19 {split} book {book}")
    except UserError:
      if skipped is None:
        raise
      skipped.append(f"tfds:{book}")
      continue
    yield book, text


def read_metadata(folder):
  """metadata.csv (no header: id, short_book_title, publication_date, url) -> {id: row}."""
  path = os.path.join(folder, "metadata.csv")
  if not os.path.exists(path):
    return {}
  with open(path, newline="", encoding="utf-8") as f:
    return {row[0]: {"title": row[1], "date": row[2], "url": row[3]}
            for row in csv.reader(f) if len(row) >= 4}


def sample_folder(book_path, folder):
  """Builds (once) a PG-19-style folder from the sample book: chapters I-IX train, X valid, XI test.

  Returns the folder. Real text cut at its chapter headings; see data/README.md.
  Built aside and renamed, so concurrent runs never see half a folder.
  """
  if os.path.exists(os.path.join(folder, "metadata.csv")):
    return folder
  with open(book_path, "rb") as f:
    text = clean_text(f.read(), book_path)
  parts = re.split(r"(?m)^(?=CHAPTER [IVXLC]+\.?\s*$)", text)
  chapters = [p for p in parts if p.startswith("CHAPTER")]
  if len(chapters) != 11:
    raise UserError(f"{book_path}: expected Botchan's 11 chapters, found {len(chapters)}")
  chapters[0] = parts[0] + chapters[0]  # the title page goes with chapter I
  tmp = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(folder)) or ".", prefix=".pg19-")
  for i, chapter in enumerate(chapters, 1):
    split = "train" if i <= 9 else "validation" if i == 10 else "test"
    os.makedirs(os.path.join(tmp, split), exist_ok=True)
    with open(os.path.join(tmp, split, f"8868-{i:02d}.txt"), "w") as f:
      f.write(chapter)
  with open(os.path.join(tmp, "metadata.csv"), "w") as f:
    for i in range(1, 12):
      f.write(f"8868-{i:02d},Botchan chapter {i},1906,https://www.gutenberg.org/ebooks/8868\n")
  try:
    os.replace(tmp, folder)
  except OSError:  # another run finished first
    shutil.rmtree(tmp, ignore_errors=True)
  return folder
