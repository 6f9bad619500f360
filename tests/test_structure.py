"""Library structure: the sub-packages are layers and imports run one way between them (counting imports
inside functions too), no module imports another's private names, there is no import cycle, and no hook or
wrapped model is discovered with ``getattr``. And the tests' own structure: every test function checks something."""
import ast
import re
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "dynatree_lib"
TESTS = Path(__file__).resolve().parent
# what each layer may import, besides itself
ALLOWED = {"core": set(), "baselines": {"core"}, "extensions": {"core"},
           "methods": {"core", "baselines", "extensions"},
           "harness": {"core", "baselines", "extensions", "methods"},
           "train": {"core", "baselines", "extensions", "methods", "harness"},
           "reporting": {"core", "baselines", "extensions", "methods", "harness"},
           "cli": {"core", "baselines", "extensions", "methods", "harness", "train", "reporting"}}
# inside core, the rooms (docs/architecture.md): policies import only the shared leaves, engines nothing else of
# core, drafts only engines (and the leaves); the loop and the drafter may import all
LEAVES = {"tree", "sampling", "result", "validate"}
CORE_ALLOWED = {"policies": LEAVES, "engines": set(), "drafts": {"engines"} | LEAVES,
                "tree": set(), "validate": set(), "sampling": {"tree", "validate"}, "result": {"tree"},
                "loop": None, "drafter": None}


def module_name(f: Path) -> str:
    return ".".join(f.relative_to(LIB).with_suffix("").parts)


def layer(module: str) -> str:
    return module.split(".")[0]


def imports() -> dict[str, set[tuple[str, str]]]:
    """module (dotted, under dynatree_lib) -> {(imported module, name)} for every import of the library, at any
    depth in the file, relative or absolute."""
    out = {}
    for f in LIB.rglob("*.py"):
        me = module_name(f)
        package = me.split(".")[:-1] if f.name != "__init__.py" else me.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.startswith("dynatree_lib"):
                    mod = node.module.removeprefix("dynatree_lib").lstrip(".")
                else:
                    continue
                for a in node.names:
                    sub = f"{mod}.{a.name}" if mod else a.name
                    is_module = (LIB / Path(*sub.split("."))).with_suffix(".py").exists() or (LIB / Path(*sub.split("."))).is_dir()
                    deps.add((sub, "") if is_module else (mod, a.name))
        out[me] = deps
    return out


def test_layers_import_one_way():
    bad = []
    for me, deps in imports().items():
        mine = layer(me)
        if mine in ("__init__", "__main__"):
            continue
        for dep, _ in deps:
            theirs = layer(dep)
            if theirs != mine and theirs not in ALLOWED[mine]:
                bad.append(f"{me} imports {dep}")
    assert not bad, bad


def test_the_rooms_of_core_import_as_the_architecture_says():
    bad = []
    for me, deps in imports().items():
        parts = me.split(".")
        if parts[0] != "core" or len(parts) < 2 or parts[1] == "__init__":
            continue
        room, allowed = parts[1], CORE_ALLOWED[parts[1]]
        for dep, _ in deps:
            theirs = dep.split(".")
            if theirs[0] != "core" or len(theirs) < 2 or theirs[1] == room or allowed is None:
                continue
            if theirs[1] not in allowed:
                bad.append(f"{me} imports {dep}")
    assert not bad, bad
    assert set(CORE_ALLOWED) == {p.stem for p in (LIB / "core").iterdir()
                                 if p.stem not in ("__init__", "__pycache__") and (p.suffix == ".py" or p.is_dir())}


# the harness's rooms (its __init__ says what each holds): each imports only the rooms before it
HARNESS_ALLOWED = {"setup": set(), "measure": {"setup"}, "peers": {"setup", "measure"},
                   "authors": {"setup", "measure"}, "experiments": {"setup", "measure", "peers", "authors"}}


def test_the_rooms_of_the_harness_import_one_way():
    bad = []
    for me, deps in imports().items():
        parts = me.split(".")
        if parts[0] != "harness" or len(parts) < 3:
            continue
        for dep, _ in deps:
            theirs = dep.split(".")
            if theirs[0] == "harness" and len(theirs) > 1 and theirs[1] != parts[1] \
                    and theirs[1] not in HARNESS_ALLOWED[parts[1]]:
                bad.append(f"{me} imports {dep}")
    assert not bad, bad
    rooms = {p.name for p in (LIB / "harness").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(HARNESS_ALLOWED) and not [p for p in (LIB / "harness").glob("*.py") if p.stem != "__init__"]


def test_no_private_cross_module_import():
    bad = [(m, d, n) for m, deps in imports().items() for d, n in deps if n.startswith("_") and d != m]
    assert not bad, bad


def test_no_import_cycle():
    graph = {m: {d for d, _ in deps if d != m} for m, deps in imports().items()}
    graph = {m: ds for m, ds in graph.items() if not m.endswith("__init__") and m != "__main__"}
    state: dict[str, int] = {}

    def visit(m, stack):
        if state.get(m) == 1:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if state.get(m) == 2 or m not in graph:
            return
        state[m] = 1
        for d in sorted(graph[m]):
            visit(d, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])


def test_hooks_and_wrapped_models_are_declared_not_discovered():
    """Policy hooks and runner capabilities are methods of ``DraftPolicy`` / ``Runner`` with defaults; nothing
    looks them up with ``getattr`` (transformers configs, whose fields vary by architecture, are the exception)."""
    names = ("next_level", "expand", "trim", "observe", "finish", "sampled", "lookup", "has_lookup", "vocab", "model",
             "inner")
    pattern = re.compile(r"getattr\([^,]+,\s*[\"'](" + "|".join(names) + r")[\"']")
    bad = [f"{module_name(f)}: {m.group(0)}" for f in LIB.rglob("*.py") for m in pattern.finditer(f.read_text())]
    assert not bad, bad


def test_short_core_functions():
    """The drafter and the loop read at once."""
    for path, fn in (("core/drafter.py", "draft_tree"), ("core/loop.py", "speculative_decode")):
        node = next(n for n in ast.walk(ast.parse((LIB / path).read_text()))
                    if isinstance(n, ast.FunctionDef) and n.name == fn)
        assert node.end_lineno - node.lineno < 60, (fn, node.end_lineno - node.lineno)


def test_no_module_is_over_500_lines():
    """A module that outgrows 500 lines holds more than one job: split it by job (the C++ kernel is not Python)."""
    long = {module_name(f): n for f in LIB.rglob("*.py") if (n := len(f.read_text().splitlines())) > 500}
    assert not long, long


def test_no_function_takes_more_than_five_positional_parameters():
    """Past five parameters (self and cls aside), a library function takes keywords: a call names what it passes."""
    wide = []
    for f in LIB.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                if len(names) > 5:
                    wide.append(f"{module_name(f)}.{node.name}")
    assert not wide, wide


# ---- every test checks something ------------------------------------------------------------------------------

PYTEST_CHECKS = {"raises", "warns", "fail", "deprecated_call"}


def dotted(func: ast.expr) -> list[str]:
    """``a.b.c`` as ["a", "b", "c"] (empty for anything but names and attributes)."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    return (parts + [func.id])[::-1] if isinstance(func, ast.Name) else []


def is_check(node: ast.AST) -> bool:
    """An assert, a raised AssertionError, pytest's raises / warns / fail, or an assert_* call (numpy's and torch's
    testing functions)."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Raise) and node.exc is not None:
        return "AssertionError" in ast.unparse(node.exc)
    if not isinstance(node, ast.Call):
        return False
    name = dotted(node.func)
    return bool(name) and ((name[0] == "pytest" and name[-1] in PYTEST_CHECKS) or name[-1].startswith("assert"))


def node_is_relative(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and node.level >= 1


class CheckFinder:
    """Which functions of a set of test modules check something, themselves or through the helpers they name
    (their own module's functions, at any depth, and those they import from another test module): a fixed point,
    starting from the functions that check directly."""

    def __init__(self, modules: dict[str, ast.Module]):
        self.functions = {m: {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
                          for m, tree in modules.items()}
        named = {m: self.helpers_named(m, tree) for m, tree in modules.items()}
        self.checking = {id(fn) for funcs in self.functions.values() for fn in funcs.values()
                         if any(is_check(n) for n in ast.walk(fn))}
        grew = True
        while grew:
            before = len(self.checking)
            self.checking |= {id(fn) for m, funcs in self.functions.items() for fn in funcs.values()
                              if any(id(h) in self.checking for h in named[m].get(id(fn), ()))}
            grew = len(self.checking) > before

    def helpers_named(self, module: str, tree: ast.Module) -> dict[int, list[ast.FunctionDef]]:
        """id(function) -> the functions of tests/ it names (its module's own, then those it imports)."""
        scope = dict(self.functions[module])
        for node in ast.walk(tree):
            source = node.module.rsplit(".", 1)[-1] if isinstance(node, ast.ImportFrom) and node.module else None
            if node_is_relative(node) and source in self.functions:  # a sibling's or a parent folder's module
                scope |= {a.asname or a.name: self.functions[source][a.name] for a in node.names
                          if a.name in self.functions[source]}
        return {id(fn): [scope[n.id] for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in scope]
                for fn in self.functions[module].values()}

    def unchecked_tests(self) -> list[str]:
        return [f"{m}.py::{name}" for m, funcs in self.functions.items() if m.startswith("test_")
                for name, fn in funcs.items() if name.startswith("test") and fn.col_offset == 0
                and id(fn) not in self.checking]


def test_every_test_function_checks_something():
    """A test function must assert, expect an exception or a warning, or call a helper of tests/ that does
    (followed through any depth of helpers)."""
    modules = {f.stem: ast.parse(f.read_text()) for f in sorted(TESTS.rglob("*.py")) if f.stem != "__init__"}
    assert len(modules) > 20 and "conftest" in modules
    unchecked = CheckFinder(modules).unchecked_tests()
    assert not unchecked, unchecked


def test_the_check_finder_flags_a_test_that_checks_nothing():
    helpers = ast.parse("def close(a, b):\n    assert a == b\n\n\ndef twice(a):\n    return close(a, a)\n")
    tests = ast.parse("from .helpers import twice\n\n\ndef test_runs():\n    run()\n\n\n"
                      "def test_via_helper():\n    twice(1)\n\n\ndef test_raises():\n"
                      "    with pytest.raises(ValueError):\n        run()\n\n\n"
                      "def test_torch():\n    torch.testing.assert_close(x, y)\n\n\n"
                      "def test_recursive():\n    test_recursive()\n")
    unchecked = CheckFinder({"helpers": helpers, "test_x": tests}).unchecked_tests()
    assert unchecked == ["test_x.py::test_runs", "test_x.py::test_recursive"]


def test_every_tool_imports():
    """Every script under tools/ imports (what it reads from the library still exists), without running it."""
    from .conftest import load_tool

    for f in sorted((Path(__file__).resolve().parents[1] / "tools").glob("*.py")):
        assert load_tool(f.stem).__doc__, f"tools/{f.name} has no docstring"


# ---- every record is made by an experiment ----------------------------------------------------------------------

RESULTS = Path(__file__).resolve().parents[1] / "results"
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
RECORD_NAME = re.compile(r'(?:results_path|reports\.run|experiments\.run)\("([a-z0-9_]+)"')


def test_every_record_has_an_experiment_that_makes_it_or_says_it_is_archived():
    """A committed record, and a record a notebook reads, is made by ``bench --experiment NAME`` (an experiment, a
    report or a list), or it is an archive of weights no longer committed, and says so in its file."""
    import json

    from dynatree_lib.harness.experiments.catalog import names

    made = set(names())
    archived = {p.stem for p in RESULTS.glob("*/*.json") if "archived" in json.loads(p.read_text())}
    committed = {p.stem for p in RESULTS.glob("*/*.json") if not p.name.endswith(".bak.json")}
    read = {m for f in NOTEBOOKS.glob("*.py") for m in RECORD_NAME.findall(f.read_text())}
    assert not (committed | read) - made - archived
    assert not archived & made, "an archived record's name is an experiment's: it would be made again"


def test_no_tool_writes_a_record():
    """tools/ holds developer utilities: none names the result store or writes under results/."""
    writes = re.compile(r"results_path|ResultStore|write_report|[\"']results[\"']\s*/|results/(?:cpu|\$|\{)")
    tools = Path(__file__).resolve().parents[1] / "tools"
    offenders = [f.name for f in sorted(tools.glob("*.py")) if writes.search(f.read_text())]
    assert not offenders, offenders


REPO = LIB.parent
LIB_PATH = re.compile(r"dynatree_lib/[A-Za-z0-9_/.]+\.(?:py|cpp|md|json)")
PROSE = ("*.md", "docs/*.md", "data/**/*.md", "figures/**/*.md", "weights/*/README.md",
         "notebooks/*.py", "dynatree_lib/**/*.py", "tools/*", "tests/*.py")


def test_every_library_path_named_in_the_repository_exists():
    """A file moved between rooms leaves no stale path in the docs, the weights' cards or a docstring."""
    stale = {f"{source.relative_to(REPO)}: {path}"
             for pattern in PROSE for source in REPO.glob(pattern) if source.is_file()
             for path in LIB_PATH.findall(source.read_text(errors="ignore")) if not (REPO / path).exists()}
    assert not stale, sorted(stale)


def test_no_call_of_ours_passes_more_than_six_positional_arguments():
    """Past a few arguments a call names them; a C++ op (``torch.ops``), which takes its schema's order, is exempt."""
    crowded = [f"{path.relative_to(LIB)}:{call.lineno} {ast.unparse(call.func)}"
               for path in LIB.rglob("*.py") for call in ast.walk(ast.parse(path.read_text()))
               if isinstance(call, ast.Call) and not ast.unparse(call.func).startswith("torch.ops.")
               and sum(not isinstance(a, ast.Starred) for a in call.args) > 6]
    assert not crowded, crowded
