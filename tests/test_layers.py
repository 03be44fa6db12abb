"""The package's layering (docs/ARCHITECTURE.md, "Layers"), read from the source: every import,
function-level ones included, points to a lower layer, and no module imports itself back."""

import ast
import pathlib

from performer import cli

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "performer"
# Lowest first; a component may import from the rows above its own, never from its row or below.
LAYERS = (
    ("version", "errors", "verdicts", "declared"),
    ("flags", "atomic", "memory", "interrupts"),
    ("favor",),
    ("attention",),
    ("models", "data"),
    ("train",),
    ("configurables",),
    ("experiments", "figures", "pages"),
    ("plans",),
    ("cli", "commands", ""),  # "": performer/__init__.py
)
RANK = {name: rank for rank, row in enumerate(LAYERS) for name in row}


def _modules():
  """{dotted name: path} of every module of the package."""
  out = {}
  for path in PACKAGE.rglob("*.py"):
    parts = ["performer", *path.relative_to(PACKAGE).with_suffix("").parts]
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


def _imports(modules):
  """{module: the package's modules it imports anywhere in its text}."""
  edges = {}
  for name, path in modules.items():
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        # `from p import m` imports module p.m (and p's __init__, which is p's own business);
        # `from m import function`: the module m
        targets = [f"{node.module}.{a.name}" for a in node.names]
      else:
        continue
      for target in targets:
        while target and target not in modules:
          target = target.rpartition(".")[0]
        if target.startswith("performer") and target != name:
          found.add(target)
    edges[name] = found
  return edges


def _component(module):
  return module.split(".")[1] if "." in module else ""


def test_the_import_graph_parses_and_finds_the_known_imports():
  edges = _imports(_modules())
  assert "performer.favor" in edges["performer.attention.performer"]
  assert "performer.train.trained" in edges["performer.experiments.recall_rows"]  # in a function
  assert set(map(_component, edges)) == set(RANK)  # a new component gets its layer


def test_every_import_points_to_a_lower_layer():
  wrong = sorted(f"{a} imports {b}" for a, targets in _imports(_modules()).items()
                 for b in targets
                 if _component(a) != _component(b) and RANK[_component(b)] >= RANK[_component(a)])
  assert not wrong


def test_no_module_imports_itself_back():
  edges = _imports(_modules())
  reach = {}

  def reachable(start):  # everything `start` imports, directly or not
    if start not in reach:
      seen, todo = set(), list(edges[start])
      while todo:
        m = todo.pop()
        if m not in seen:
          seen.add(m)
          todo.extend(edges[m])
      reach[start] = seen
    return reach[start]
  cycles = sorted(m for m in edges if m in reachable(m))
  assert not cycles


def test_no_experiment_or_backend_imports_a_sibling():
  """Experiments share helpers (results, protein_matrices, speed_worker), not each other; a
  backend reads the registry, not another backend."""
  edges = _imports(_modules())
  experiments = {f"performer.experiments.{n}" for n in cli.EXPERIMENTS}
  wrong = [f"{a} imports {b}" for a in experiments for b in edges[a] if b in experiments]
  backends = {m for m in edges if m.startswith("performer.attention.")} - {
      "performer.attention.registry"}
  wrong += [f"{a} imports {b}" for a in backends for b in edges[a] if b in backends]
  assert not wrong


def test_no_module_is_longer_than_400_lines():
  """A module a newcomer reads top to bottom (docs/ARCHITECTURE.md): past 400 lines it holds
  more than one concern."""
  long = [f"{path.relative_to(PACKAGE)}: {n} lines" for path in sorted(PACKAGE.rglob("*.py"))
          if (n := len(path.read_text().splitlines())) > 400]
  assert not long


def test_no_function_body_is_longer_than_60_lines():
  """One screen per function (docs/ARCHITECTURE.md): its code from the first statement after the
  docstring to its end, so that the docstring's shapes and errors cost nothing."""
  long = []
  for path in sorted(PACKAGE.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        continue
      body = node.body[1:] if ast.get_docstring(node) is not None else node.body
      if body and (n := node.end_lineno - body[0].lineno + 1) > 60:
        long.append(f"{path.relative_to(PACKAGE)}: {node.name} {n} lines")
  assert not long


def test_every_module_says_what_it_is_in_one_to_three_lines():
  """A module's docstring says what and why (docs/ARCHITECTURE.md holds the design notes), so a
  reader sees the code on the first screen."""
  wrong = []
  for path in sorted(PACKAGE.rglob("*.py")):
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    if not doc or not 1 <= len(doc.splitlines()) <= 3:
      wrong.append(f"{path.relative_to(PACKAGE)}: {len(doc.splitlines()) if doc else 0} lines")
  assert not wrong
