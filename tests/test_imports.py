"""The package's import graph, built from the source: no cycles, the library never imports
the command line, and an import inside a function says why it is there (an optional or heavy
dependency)."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nplace"


def module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(ROOT).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, node) -> set[str]:
  """The nplace modules an import statement of module `name` loads (`from a import b` is
  module a.b when that is a module, else a)."""
  if isinstance(node, ast.Import):
    return {alias.name for alias in node.names if alias.name in MODULES}
  base = node.module or ""
  if node.level:
    package = name.split(".")[:len(name.split(".")) - node.level + (MODULES[name].name == "__init__.py")]
    base = ".".join([*package, *([node.module] if node.module else [])])
  found = {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES}
  rest = [alias for alias in node.names if f"{base}.{alias.name}" not in MODULES]
  return found | ({base} if rest and base in MODULES else set())


def imports(name: str):
  """(import node, the nplace modules it loads, whether it sits inside a function) of a module."""
  tree = ast.parse(MODULES[name].read_text())
  local = {id(sub) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
           for sub in ast.walk(node)}
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      yield node, imported(name, node), id(node) in local


GRAPH = {name: set().union(*(targets for _, targets, _ in imports(name))) - {name} for name in MODULES}


def test_the_graph_sees_the_package():
  assert "nplace.train.loop" in GRAPH["nplace.commands.train"]
  assert {"nplace.model.decoder", "nplace.runtime.sharding"} <= GRAPH["nplace.train.steps"]
  assert len(MODULES) > 60


def test_no_import_cycles():
  state, path = {}, []

  def visit(name):
    state[name] = "open"
    path.append(name)
    for target in sorted(GRAPH[name]):
      assert state.get(target) != "open", "import cycle: " + " -> ".join(path[path.index(target):] + [target])
      if target not in state:
        visit(target)
    path.pop()
    state[name] = "done"

  for name in sorted(GRAPH):
    if name not in state:
      visit(name)


def test_the_library_never_imports_the_commands():
  library = [name for name in GRAPH if not name.startswith("nplace.commands")]
  offenders = {name: sorted(t for t in GRAPH[name] if t.startswith("nplace.commands")) for name in library}
  assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_the_config_reaches_only_the_bottom_floor():
  """Every floor reads the config, so what it imports, directly or not, lies below it: errors,
  the placements (their names, for validation; the model reads them too) and data/ (the
  checks of config.data)."""
  reached, todo = set(), ["nplace.config"]
  while todo:
    found = GRAPH[todo.pop()] - reached
    reached |= found
    todo += found
  assert {name for name in reached if not name.startswith("nplace.data.")} == {"nplace.errors", "nplace.placements"}


def test_an_import_inside_a_function_says_why():
  """A comment on the import's line (or the line above) names the optional or heavy dependency."""
  silent = []
  for name, path in MODULES.items():
    lines = path.read_text().splitlines()
    for node, _, local in imports(name):
      here, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
      if local and "#" not in here and not above.startswith("#"):
        silent.append(f"{path.relative_to(ROOT)}:{node.lineno}: {here.strip()}")
  assert silent == []


def test_studies_layers():
  """studies/report/ only renders: nothing else in studies/ imports it, and lab/ (which the
  report shows) imports none of it; the protocols' vocabulary imports nothing of nplace."""
  report = {name for name in GRAPH if name.startswith("nplace.studies.report")}
  below = [name for name in GRAPH if name.startswith("nplace.studies") and name not in report]
  assert {name: sorted(GRAPH[name] & report) for name in below if GRAPH[name] & report} == {}
  assert not {t for t in GRAPH["nplace.protocol"] if t.startswith("nplace")}


def test_experiment_files_import_only_declarations():
  """An experiment file (loaded by the library at run time, never at import) imports only the
  config, the placements and the protocols' vocabulary: nothing the library loads at import
  time imports it back."""
  allowed = {"nplace.config", "nplace.placements", "nplace.protocol", "nplace.experiments"}
  found = {}
  for path in sorted((ROOT / "experiments").glob("*.py")):
    tree = ast.parse(path.read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    modules |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    found[path.name] = sorted(m for m in modules if m.startswith("nplace") and m not in allowed)
  assert {name: bad for name, bad in found.items() if bad} == {}
  assert not any("nplace.experiments" in targets for targets in GRAPH.values())


def test_every_subpackage_states_its_rule():
  """Each subpackage's __init__ docstring says what it owns and what it may import."""
  silent = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE
            and "import" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
  assert silent == []
