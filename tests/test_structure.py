"""Library structure (issue 13): imports between modules run one way (no cycles, counting imports inside
functions too) and no module imports another's private names."""
import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "dynatree_lib"


def imports() -> dict[str, set[tuple[str, str]]]:
    """module -> {(imported module, name)} for every relative import, at any depth in the file."""
    out = {}
    for f in LIB.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps |= {(node.module, a.name) for a in node.names}
                else:
                    deps |= {(a.name, "") for a in node.names}
        out[f.stem] = deps
    return out


def test_no_private_cross_module_import():
    bad = [(m, d, n) for m, deps in imports().items() for d, n in deps if n.startswith("_")]
    assert not bad, bad


def test_no_import_cycle():
    graph = {m: {d for d, _ in deps if d != m} for m, deps in imports().items()}
    graph.pop("__init__", None), graph.pop("__main__", None)
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
