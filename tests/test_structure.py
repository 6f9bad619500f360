"""Library structure: the sub-packages are layers and imports run one way between them (counting imports
inside functions too), no module imports another's private names, there is no import cycle, and no hook or
wrapped model is discovered with ``getattr``."""
import ast
import re
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "dynatree_lib"
# what each layer may import, besides itself
ALLOWED = {"core": set(), "baselines": {"core"}, "extensions": {"core"},
           "methods": {"core", "baselines", "extensions"},
           "harness": {"core", "baselines", "extensions", "methods"},
           "draft": {"core", "baselines", "extensions", "methods", "harness"},
           "reporting": {"core", "baselines", "extensions", "methods", "harness"},
           "cli": {"core", "baselines", "extensions", "methods", "harness", "draft", "reporting"}}


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
    names = ("more", "trim", "lookup_skip", "copies_trusted", "observe_copies", "lookup", "has_lookup", "vocab", "model",
             "inner")
    pattern = re.compile(r"getattr\([^,]+,\s*[\"'](" + "|".join(names) + r")[\"']")
    bad = [f"{module_name(f)}: {m.group(0)}" for f in LIB.rglob("*.py") for m in pattern.finditer(f.read_text())]
    assert not bad, bad


def test_short_core_functions():
    """The drafter and the loop read at once."""
    for path, fn in (("core/drafting.py", "draft_tree"), ("core/decoding.py", "speculative_decode")):
        node = next(n for n in ast.walk(ast.parse((LIB / path).read_text()))
                    if isinstance(n, ast.FunctionDef) and n.name == fn)
        assert node.end_lineno - node.lineno < 60, (fn, node.end_lineno - node.lineno)


def test_no_module_is_over_500_lines():
    """A module that outgrows 500 lines holds more than one job: split it by job (the C++ kernel is not Python)."""
    long = {module_name(f): n for f in LIB.rglob("*.py") if (n := len(f.read_text().splitlines())) > 500}
    assert not long, long
