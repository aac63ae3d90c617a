"""The shape of the code, as ARCHITECTURE.md promises it: folders by layer, few flat modules,
no import cycle, and modules and functions small enough to read in one sitting (ruff's C901
holds each function's complexity at 15: pyproject.toml).

These read the source (ast), so they hold for every module, new ones included."""

import ast
from collections.abc import Iterator
from pathlib import Path

import memoryd

PACKAGE = Path(memoryd.__file__).parent
MAX_FLAT_MODULES = 12
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 7


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
    count += (args.vararg is not None) + (args.kwarg is not None)
    first = (args.posonlyargs + args.args)[:1]
    return count - (first != [] and first[0].arg in ("self", "cls"))


def imported(name: str, tree: ast.AST, known: set[str]) -> set[str]:
    """The memoryd modules `name` imports anywhere but under `if TYPE_CHECKING:`."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(sub) for sub in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {module for module in found if module in known and module != name}


def test_at_most_twelve_modules_lie_flat_and_every_folder_says_what_it_holds() -> None:
    flat = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(flat) <= MAX_FLAT_MODULES, flat
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        tree = ast.parse((folder / "__init__.py").read_text())
        doc = ast.get_docstring(tree)
        assert doc and "May import" in doc, f"{folder.name}/__init__.py: say what it may import"
        assert len(tree.body) == 1, f"{folder.name}/__init__.py holds code, not only its docstring"


def test_no_module_is_over_800_lines() -> None:
    sizes = {name: path.read_text().count("\n") for name, path in modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_is_over_80_lines_or_takes_over_7_parameters() -> None:
    long: list[str] = []
    wide: list[str] = []
    for name, path in modules():
        for node in functions(ast.parse(path.read_text())):
            assert node.end_lineno is not None
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.append(f"{name}.{node.name}")
            if parameters(node) > MAX_PARAMETERS:
                wide.append(f"{name}.{node.name}")
    assert (long, wide) == ([], [])


def test_no_import_cycle() -> None:
    trees = {name: ast.parse(path.read_text()) for name, path in modules()}
    graph = {name: imported(name, tree, set(trees)) for name, tree in trees.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    # A package imports nothing (its __init__ is a docstring), so `memoryd.x` -> `memoryd`
    # edges never make a cycle by themselves.
    assert cycles == []


# The folders bottom -> top: each imports only folders below it (and the flat modules).
ORDER = [
    "model",  # pure values, and the pure text helpers every layer uses
    "storage",  # the state store, atomic file writes, the audit log
    "discover",  # which memory dirs there are
    "indexing",  # the index pass
    "versions",  # kept versions of what memoryd reads
    "trash",  # moves out and back, the pass journal
    "dream",  # the dream pass
    "discipline",  # record stores and findings
    "recall",  # search and the MCP server
    "daemon",  # the long-running process
    "views",  # renderers for people
    "claude",  # Claude Code's hooks and settings
    "commands",  # one module per command, and the use cases joining several layers
]


def folder_names() -> set[str]:
    return {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def memoryd_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every memoryd import in a module, wherever it is (an import made on
    first use, or only for the type checker, is still a dependency)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "memoryd" and not node.level:
            targets = [f"memoryd.{alias.name}" for alias in node.names]  # from memoryd import x
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [node.module]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        yield from ((node.lineno, t) for t in targets if t.split(".")[0] == "memoryd")


def folder_module_imports() -> Iterator[tuple[str, Path, int, str]]:
    """(folder, module path, line, imported module) for every memoryd import in a folder."""
    for name, path in modules():
        parts = name.split(".")
        if len(parts) >= 3:
            yield from ((parts[1], path, line, target) for line, target in memoryd_imports(path))


def folder_of(module: str) -> str:
    """`memoryd.<folder>...` -> its folder (or flat module) name; "" for `memoryd` itself."""
    return module.split(".")[1] if "." in module else ""


def folder_imports() -> dict[str, set[str]]:
    """Each folder of memoryd and the other folders its modules import."""
    folders = folder_names()
    found: dict[str, set[str]] = {folder: set() for folder in folders}
    for folder, _, _, target in folder_module_imports():
        if folder_of(target) in folders - {folder}:
            found[folder].add(folder_of(target))
    return found


def test_the_folders_form_a_stack() -> None:
    """Every folder has its place in ORDER and imports no folder above it: what a layer needs
    from above moves up into the layer that joins them, what layers below need moves down."""
    assert folder_names() == set(ORDER)
    rank = {folder: place for place, folder in enumerate(ORDER)}
    upward = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {folder} imports {target}, above it"
        for folder, path, line, target in folder_module_imports()
        if rank.get(folder_of(target), -1) > rank[folder]
    ]
    assert upward == [], "\n".join(upward)


def test_the_flat_plumbing_reaches_no_folder_above_its_importers() -> None:
    """A folder imports a flat module as plumbing; were `config` or `runtime` to import a
    higher folder at run time, every folder importing them would hide an upward edge. Imports
    for the type checker only (under TYPE_CHECKING) name types and load nothing."""
    known = {name for name, _ in modules()}
    flat = {name: path for name, path in modules() if path.parent == PACKAGE and "." in name}
    direct = {n: imported(n, ast.parse(p.read_text()), known) for n, p in flat.items()}

    def reach(name: str, seen: set[str]) -> set[str]:
        out: set[str] = set()
        for target in direct[name]:
            module = ".".join(target.split(".")[:2])
            if module in flat and module not in seen:
                out |= reach(module, seen | {module})
            elif module not in flat:
                out.add(target.split(".")[1])
        return out

    rank = {folder: place for place, folder in enumerate(ORDER)}
    upward: list[str] = []
    for folder, path, line, target in folder_module_imports():
        module = ".".join(target.split(".")[:2])
        if module in flat and module != "memoryd.cli":
            above = sorted(f for f in reach(module, {module}) if rank[f] > rank[folder])
            if above:
                where = path.relative_to(PACKAGE.parent)
                upward.append(f"{where}:{line}: {module} reaches {above}, above {folder}")
    assert upward == [], "\n".join(upward)


def test_each_folder_imports_exactly_the_folders_its_docstring_names() -> None:
    """A new edge between layers is a change of the folder's `May import:` line, made on
    purpose, not a side effect of an import added in passing."""
    for folder, imported_now in sorted(folder_imports().items()):
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
        said = " ".join(doc.split()).partition("May import: ")[2].partition("the flat")[0]
        declared = {word.strip(" ,") for word in said.split(",")} - {"", "and", "only"}
        assert imported_now == declared, f"{folder}/__init__.py: imports {sorted(imported_now)}"
