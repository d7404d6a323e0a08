"""The package's layers (docs/design.md, "The layout"): imports point one way, from the
experiments down to the codec. Read from the source's import statements, so it stays true as
modules are added: a module in a new folder, or an import that points up, fails here."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cdsgd_mx"

# From the top down; a module may import its own layer and the ones below it, never above.
LAYERS = [
    ("experiments", ["cdsgd_mx.experiments", "cdsgd_mx.bench", "cdsgd_mx.examples"]),
    ("trainer", ["cdsgd_mx.trainer"]),
    ("worker", ["cdsgd_mx.worker"]),
    ("server", ["cdsgd_mx.server"]),
    ("cluster", ["cdsgd_mx.cluster"]),
    ("wire", ["cdsgd_mx.wire"]),
    ("codec", ["cdsgd_mx.codec", "cdsgd_mx._native", "cdsgd_mx.reference", "cdsgd_mx.mxnet_import",
               "cdsgd_mx.numerics"]),
]
# The package's face: its __init__ (which registers the store and hands out Trainer, CDSGD,
# ConfigError) and the one-line entry points that keep the documented `python -m` names.
FACE = {"cdsgd_mx", "cdsgd_mx.launch", "cdsgd_mx.slurm", "cdsgd_mx.mxnet_launch", "cdsgd_mx.demo", "cdsgd_mx.data"}
FACE_LEVEL = -1  # above everything: only the experiments' scripts may import the face itself


def level(module):
    if module in FACE:
        return FACE_LEVEL
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path, name):
    """The cdsgd_mx modules `path` (module `name`) imports, with the line of each import."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "cdsgd_mx":
                    yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "cdsgd_mx":
                continue
            for a in node.names:  # `from cdsgd_mx.wire import auth` imports cdsgd_mx.wire.auth
                sub = mod + "." + a.name
                is_module = (ROOT / (sub.replace(".", "/") + ".py")).exists() or (ROOT / sub.replace(".", "/")).is_dir() \
                    or a.name == "_native"
                yield (sub if is_module else mod), node.lineno


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    """A module outside every layer (a new top-level file, a new folder) must be placed."""
    unplaced = [module_name(p) for p in MODULES if level(module_name(p)) is None
                and not module_name(p).endswith("__main__")]
    assert not unplaced, "modules in no layer of tests/test_layout.py: %s" % unplaced


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    name = module_name(path)
    if name.endswith("__main__"):
        name = name.rsplit(".", 1)[0]
    mine = level(name)
    if mine == FACE_LEVEL:
        return  # the face may import every layer
    up = []
    for mod, line in imported(path, name):
        theirs = level(mod)
        assert theirs is not None, "%s:%d imports %s, which is in no layer" % (path.name, line, mod)
        if theirs < mine and not (theirs == FACE_LEVEL and mine == 0):  # experiments use the package as users do
            up.append("line %d: %s (%s) imports %s (%s)" % (line, name, LAYERS[mine][0], mod,
                                                            "the package's face" if theirs == FACE_LEVEL
                                                            else LAYERS[theirs][0]))
    assert not up, "imports pointing up:\n" + "\n".join(up)


def test_the_checker_catches_an_import_pointing_up(tmp_path):
    """The reader itself: a wire module importing the worker is reported as pointing up."""
    fake = ROOT / "cdsgd_mx" / "wire" / "protocol.py"
    source = tmp_path / "protocol.py"
    source.write_text("from cdsgd_mx.worker import kvstore\nfrom . import auth\nfrom .. import codec\n")
    # read it as if it were cdsgd_mx/wire/protocol.py
    got = list(imported(source, module_name(fake)))
    assert [m for m, _ in got] == ["cdsgd_mx.worker.kvstore", "cdsgd_mx.wire.auth", "cdsgd_mx.codec"]
    assert level("cdsgd_mx.worker.kvstore") < level("cdsgd_mx.wire.protocol")


def circles(graph):
    """The import circles of graph {module: {modules it imports}}: each a sorted list of the
    modules that import one another round (Tarjan's strongly connected components)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_another_that_imports_it_back():
    """No circle of imports in the package, lazy imports (inside functions) included: a circle
    means two modules each need the other, and neither has one job (issue 56: the launcher and
    the emulator were one, until link shaping got a module of its own)."""
    graph = {}
    for path in MODULES:
        name = module_name(path)
        graph[name] = {m for m, _ in imported(path, name) if m != name}
    assert not circles(graph), "import circles: %s" % circles(graph)


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
