"""The layout of docs/layout.md, checked on the source: module and class size, private names,
one-way imports.

Each rule is a function from one module to the problems it finds.
``test_each_rule_fails_on_a_bad_module`` feeds every rule a synthetic bad package and watches it
fail; ``KNOWN`` names the problems whose fix
belongs to another change, and ``test_known_exceptions_are_still_needed`` fails once one is fixed.
"""

import ast
import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run_python

from seeder._internals import INTERNALS

PKG = Path(__file__).resolve().parents[1] / "seeder"
MODULES = sorted(PKG.rglob("*.py"))
MAX_MODULE_LINES = 700  # docs/development.md: a bound past which a module holds several concepts
MAX_CLASS_LINES = 400  # and a class several responsibilities

# Layers from the bottom up (docs/layout.md, "Import order"): a module may import its own layer or a
# lower one. A module's layer is that of the longest dotted prefix listed here.
LAYERS = {
    # the core: seeding, state, data, checkpoint, integrations, the package
    "_errors": 0,
    "_checks": 0,
    "_internals": 0,
    "_atomic": 0,
    "_safefile": 0,
    "_hooks": 0,
    "_digest": 0,
    "_seeding.derive": 0,
    "_seeding.seedseq": 0,
    "_seeding.announce": 0,
    "_seeding.rngbase": 1,
    "_seeding.rngs": 1,
    "_seeding.rngs_torch": 1,
    "_seeding.distributed": 1,
    "_seeding.determinism": 1,
    "_seeding.participant": 2,
    "_seeding.registry": 2,
    "_seeding.foreign": 2,
    "_seeding.bound": 2,
    "_state": 2,
    "_seeding.core": 3,
    "_seeding.default": 3,
    "_checkpoint": 4,
    "_checkpoint_checks": 4,
    "data": 4,
    "integrations": 5,
    "__init__": 6,
    "pyt": 6,
    # the tools: they stand on the core, which never imports them (TOOLS)
    "_run.variables": 7,
    "_run.draws": 7,
    "_run.fingerprint": 7,
    "_run.where": 7,
    "_run.modules": 7,
    "env": 7,
    "_run": 8,
    "verify": 8,
    "_cli": 9,
    "__main__": 9,
}
#: The tools: the run hooks, ``seeder verify`` / ``compare`` / ``locate``, snapshots and their
#: diff, the command line. No core module imports one, at the top, in a function or by string;
#: they install their callbacks at the core's hook point (``seeder._hooks``) in the runs they start.
TOOLS = ("_run", "verify", "env", "_cli", "__main__")
#: What the tools (``env``, ``verify``) never import: they need no Seeder, state or data path.
NOT_FOR_TOOLS = (
    "_seeding.core",
    "_seeding.default",
    "_state",
    "data",
    "_checkpoint",
    "_checkpoint_checks",
)

# Private names of other libraries that seeder may read: exactly those listed (and checked) in
# seeder/_internals.py, plus sys._getframe: seeder._seeding.foreign names the user's line that
# called a foreign seeding function (and the framework function on the stack), the one place seeder
# reads the call stack.
THIRD_PARTY_PRIVATE = {
    part
    for item in INTERNALS.values()
    for part in item.name.replace(" ", ".").split(".")
    if part.startswith("_")
} | {"_getframe"}
# Not yet in seeder/_internals.py: datasets' IterableDataset._ex_iterable/_distributed
# (seeder/data/_streams.py and iterable.py: a shuffle buffer's presence, a split by node).
THIRD_PARTY_PRIVATE |= {"_ex_iterable", "_distributed"}
# argparse's type of ``add_subparsers()``, named in annotations only (typeshed has no public name).
THIRD_PARTY_PRIVATE |= {"_SubParsersAction"}

# Known problems not fixed yet: (rule, module) -> {problem text: why}.
# Remove an entry when its fix lands (test_known_exceptions_are_still_needed says when).
KNOWN: dict[tuple[str, str], dict[str, str]] = {}


# -------------------------------------------------------------------------------------------
# reading the source
@functools.cache
def _parsed(text: str, name: str) -> ast.Module:
    return ast.parse(text, name)


def parse(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per text: each rule runs on each module, and the rules'
    tests on all of them (read only: no rule changes a tree)."""
    return _parsed(path.read_text(), str(path))


def module_name(path: Path, pkg: Path = PKG) -> str:
    rel = path.relative_to(pkg).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__") or "__init__"


def _prefix(name: str, table) -> str:
    """The longest dotted prefix of ``name`` that ``table`` lists ('' if none)."""
    parts = name.split(".")
    return next(
        (".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in table), ""
    )


def layer(name: str) -> int:
    key = _prefix(name, LAYERS)
    if not key:
        raise AssertionError(
            f"seeder.{name} is not in the layout of docs/layout.md; add it to "
            f"tests/test_architecture.py"
        )
    return LAYERS[key]


def _is_module(pkg: Path, dotted: str) -> bool:
    where = pkg.joinpath(*dotted.split(".")) if dotted else pkg
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def _resolve(pkg: Path, dotted: str, name: str) -> str:
    """The seeder module ``from seeder.<dotted> import name`` reads: the submodule if ``name`` is
    one."""
    sub = f"{dotted}.{name}".strip(".")
    if _is_module(pkg, sub):
        return sub
    return dotted or "__init__"


def _import_targets(node: ast.AST, path: Path, pkg: Path) -> Iterator[tuple[str, ast.alias]]:
    """(seeder module, alias) for each name of one ``import`` / ``from ... import`` statement."""
    here = module_name(path, pkg)
    package = (
        []
        if here == "__init__"
        else here.split(".")
        if path.name == "__init__.py"
        else here.split(".")[:-1]
    )
    root = pkg.name
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package[: len(package) - (node.level - 1)]
            dotted = ".".join([*base, *(node.module.split(".") if node.module else [])])
        elif node.module and (node.module == root or node.module.startswith(root + ".")):
            dotted = node.module[len(root) + 1 :]
        else:
            return
        for alias in node.names:
            yield _resolve(pkg, dotted, alias.name), alias
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == root or alias.name.startswith(root + "."):
                yield alias.name[len(root) + 1 :] or "__init__", alias


def imports(
    path: Path, pkg: Path = PKG, typing_too: bool = False
) -> Iterator[tuple[str, str, int]]:
    """(seeder module imported, name taken from it, line) for every import in ``path``.

    Sees relative imports at any depth (``from .. import x`` is the package root, ``__init__``),
    imports inside functions, and string imports: ``importlib.import_module("seeder.x")`` and any
    string literal that is exactly a seeder module's dotted path in a module that calls
    ``import_module``. Imports under ``if TYPE_CHECKING:`` are left out (annotations only, nothing
    runs them) unless ``typing_too``.
    """
    tree = parse(path)
    typing_only = (
        set()
        if typing_too
        else {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
    )
    root = pkg.name
    string_imports = any(
        (isinstance(n, ast.Name) and n.id == "import_module")
        or (isinstance(n, ast.Attribute) and n.attr == "import_module")
        for n in ast.walk(tree)
    )
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only:
            for target, alias in _import_targets(node, path, pkg):
                yield target, alias.name, node.lineno
        elif (
            string_imports
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(root + ".")
            and node.value[len(root) + 1 :]
            and _is_module(pkg, node.value[len(root) + 1 :])
        ):
            yield node.value[len(root) + 1 :], "*", node.lineno


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_defined(tree: ast.AST) -> set[str]:
    """Private functions, classes, variables and attributes (``x._a = ...``) a module defines."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if _private(n)}


def private_owners(pkg: Path = PKG) -> dict[str, set[str]]:
    """Each private name -> the seeder modules that define it."""
    owners: dict[str, set[str]] = {}
    for p in sorted(pkg.rglob("*.py")):
        for name in private_names_defined(parse(p)):
            owners.setdefault(name, set()).add(module_name(p, pkg))
    return owners


# -------------------------------------------------------------------------------------------------
# the rules
def check_size(path: Path, pkg: Path = PKG) -> list[str]:
    n = len(path.read_text().splitlines())
    return (
        [f"{n} lines (at most {MAX_MODULE_LINES}: one concept per file)"]
        if n > MAX_MODULE_LINES
        else []
    )


def check_class_size(path: Path, pkg: Path = PKG) -> list[str]:
    return [
        f"class {node.name}: {node.end_lineno - node.lineno + 1} lines (at most {MAX_CLASS_LINES})"
        for node in ast.walk(parse(path))
        if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]


def check_private_imports(path: Path, pkg: Path = PKG) -> list[str]:
    """``from .x import _y`` and ``x._y`` where ``x`` is another seeder module."""
    here = module_name(path, pkg)
    bad = [
        f"line {line}: {name} from seeder.{target}"
        for target, name, line in imports(path, pkg)
        if target != here and _private(name) and target.split(".")[-1] != name
    ]  # a private module is fine
    tree = parse(path)
    modules = {}  # local name -> the seeder module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target, alias in _import_targets(node, path, pkg):
                if isinstance(node, ast.Import) and alias.asname:
                    modules[alias.asname] = target
                elif isinstance(node, ast.ImportFrom) and target.split(".")[-1] == alias.name:
                    modules[alias.asname or alias.name] = target
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
            and modules[node.value.id] != here
        ):
            bad.append(
                f"line {node.lineno}: {node.value.id}.{node.attr} (seeder.{modules[node.value.id]})"
            )
    return bad


def _on_self(node: ast.Attribute) -> bool:
    """``self._x`` / ``cls._x``: an object using what its class (or a framework base class)
    defines."""
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def check_private_attributes(
    path: Path, pkg: Path = PKG, owners: dict[str, set[str]] = None
) -> list[str]:
    """``obj._x`` on another object is allowed only when ``_x`` is defined in this module and in no
    other.

    A same-named attribute of the reader does not make ``sampler._seeder`` its own: if another
    seeder module defines ``_seeder`` too, the read may reach into that module's object.
    """
    owners = private_owners(pkg) if owners is None else owners
    here = module_name(path, pkg)
    bad = []
    for n in ast.walk(parse(path)):
        if (
            isinstance(n, ast.Attribute)
            and _private(n.attr)
            and not _on_self(n)
            and n.attr not in THIRD_PARTY_PRIVATE
        ):
            mine = owners.get(n.attr, set())
            if here not in mine:
                bad.append(f"line {n.lineno}: .{n.attr} (defined in no class of this module)")
            elif mine != {here}:
                others = ", ".join(sorted(f"seeder.{m}" for m in mine - {here}))
                bad.append(
                    f"line {n.lineno}: .{n.attr} (also defined in {others}: whose object is it?)"
                )
    return bad


def is_tool(name: str) -> bool:
    return name.split(".")[0] in TOOLS


def check_one_way(path: Path, pkg: Path = PKG) -> list[str]:
    here = module_name(path, pkg)
    mine = here.split(".")[0]
    bad = []
    for target, _, line in imports(path, pkg):
        theirs = target.split(".")[0]
        if target == here or (theirs == mine and _prefix(target, LAYERS) == _prefix(here, LAYERS)):
            continue
        if is_tool(target) and not is_tool(here):
            bad.append(
                f"line {line}: imports seeder.{target}, a tool (the core emits seeder._hooks)"
            )
        elif (
            (theirs == "integrations" and mine != "integrations")
            or layer(target) > layer(here)
            or (mine in ("env", "verify") and _prefix(target, {k: 0 for k in NOT_FOR_TOOLS}))
        ):
            bad.append(f"line {line}: imports seeder.{target}")
    if not is_tool(here):
        bad += [f"line {line}: names seeder.{name}, a tool" for name, line in tool_names(path, pkg)]
    return bad


def tool_names(path: Path, pkg: Path = PKG) -> Iterator[tuple[str, int]]:
    """(tool module, line) for each string that is exactly a tool module's dotted path
    (``"seeder.verify._runner"``), whatever reads it (``import_module``, ``__import__``,
    ``find_spec``, a table)."""
    root = pkg.name
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value[len(root) + 1 :] if node.value.startswith(root + ".") else ""
            if name and is_tool(name) and _is_module(pkg, name):
                yield name, node.lineno


def check_exports(path: Path, pkg: Path = PKG) -> list[str]:
    """A module's ``__all__`` lists what it defines: no re-export lists, no module standing in for
    another.

    Package ``__init__`` files are the public surface (``seeder``, ``seeder.verify``) and may gather
    names.
    """
    if path.name == "__init__.py":
        return []
    tree = parse(path)
    bad = [
        f"line {n.lineno}: replaces itself in sys.modules"
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Store)
        and ast.unparse(n.value) == "sys.modules"
    ]
    defined, imported = set(), set()
    for node in tree.body:
        for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                defined |= {
                    t.id
                    for target in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    for t in ast.walk(target)
                    if isinstance(t, ast.Name)
                }
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                imported |= {(a.asname or a.name).split(".")[0] for a in n.names}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            bad += [
                f"line {node.lineno}: __all__ lists {e.value}, defined elsewhere"
                for e in node.value.elts
                if isinstance(e, ast.Constant) and e.value not in defined
            ]
    return bad


#: The modules that may read the call stack: a wrapper of ``random.seed`` & co. names the line
#: that called it; seeder locate's recorder (a tool, never on the training data path) names the
#: user's line of each operation.
STACK_READERS = {"_seeding.foreign", "_run.where"}
#: Call-stack and garbage-collector reads: who is calling is for the caller to say (a loader tells
#: its sampler).
STACK_READS = {
    "_getframe",
    "f_back",
    "f_locals",
    "extract_stack",
    "currentframe",
    "get_referrers",
    "get_referents",
}


def check_stack_reads(path: Path, pkg: Path = PKG) -> list[str]:
    """Reads of the call stack or of the garbage collector's referrers
    outside :data:`STACK_READERS`."""
    if module_name(path, pkg) in STACK_READERS:
        return []
    tree = parse(path)
    return [
        f"line {node.lineno}: reads .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in STACK_READS
    ]


RULES = {
    "size": check_size,
    "class_size": check_class_size,
    "exports": check_exports,
    "private_imports": check_private_imports,
    "private_attributes": check_private_attributes,
    "one_way": check_one_way,
    "stack_reads": check_stack_reads,
}


def problems(rule: str, path: Path, pkg: Path = PKG, **kw) -> list[str]:
    """What ``rule`` finds in ``path``, less the known exceptions."""
    known = KNOWN.get((rule, module_name(path, pkg)), {}) if pkg == PKG else {}
    return [p for p in RULES[rule](path, pkg, **kw) if not any(k in p for k in known)]


# -------------------------------------------------------------------------------------------------
# the tests
def test_modules_are_small():
    big = {str(p.relative_to(PKG.parent)): problems("size", p) for p in MODULES}
    assert not {k: v for k, v in big.items() if v}


def test_classes_are_small():
    big = {str(p.relative_to(PKG.parent)): problems("class_size", p) for p in MODULES}
    assert not {k: v for k, v in big.items() if v}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_names_across_modules(path):
    bad = problems("private_imports", path)
    assert not bad, f"seeder.{module_name(path)} uses private names of other modules: {bad}"


@pytest.fixture(scope="module")
def owners():
    return private_owners()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_attributes_of_other_modules_objects(path, owners):
    bad = problems("private_attributes", path, owners=owners)
    assert not bad, f"seeder.{module_name(path)} reads private attributes defined elsewhere: {bad}"


def test_modules_export_what_they_define():
    bad = {module_name(p): problems("exports", p) for p in MODULES}
    assert not {k: v for k, v in bad.items() if v}, (
        "re-exports (import the name from the module that defines it)"
    )


def test_only_foreign_reads_the_call_stack():
    bad = {module_name(p): problems("stack_reads", p) for p in MODULES}
    assert not {k: v for k, v in bad.items() if v}, (
        "call-stack or gc reads: let the caller say who it is"
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_one_way(path):
    bad = problems("one_way", path)
    assert not bad, f"imports against the one-way order of docs/layout.md: {bad}"


class _Components:
    """Tarjan's strongly connected components of a graph ``{node: {successor, ...}}``: the groups
    of more than one node, each reachable from every other."""

    def __init__(self, graph: dict[str, set[str]]):
        self.graph = graph
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.groups: list[list[str]] = []
        for v in graph:
            if v not in self.index:
                self.visit(v)

    def visit(self, v: str) -> None:
        self.index[v] = self.low[v] = len(self.index)
        self.stack.append(v)
        for w in self.graph[v] - {v}:
            if w not in self.graph:
                continue
            if w not in self.index:
                self.visit(w)
                self.low[v] = min(self.low[v], self.low[w])
            elif w in self.stack:
                self.low[v] = min(self.low[v], self.index[w])
        if self.low[v] == self.index[v]:
            self.pop_group(v)

    def pop_group(self, v: str) -> None:
        """Take ``v``'s component off the stack; keep it if it holds more than ``v``."""
        group: list[str] = []
        while not group or group[-1] != v:
            group.append(self.stack.pop())
        if len(group) > 1:
            self.groups.append(sorted(group))


def import_cycles(pkg: Path = PKG) -> list[list[str]]:
    """Groups of seeder modules that import each other, directly or through others (any import,
    at the top, inside a function or under ``if TYPE_CHECKING:``: a module that names another's
    type for its annotations depends on it too)."""
    graph = {
        module_name(p, pkg): {t for t, _, _ in imports(p, pkg, typing_too=True)}
        for p in sorted(pkg.rglob("*.py"))
    }
    return _Components(graph).groups


def test_no_import_cycles():
    assert not import_cycles(), (
        "modules that import each other: one of them holds the other's concept"
    )


def test_the_cycle_check_finds_a_cycle(tmp_path):
    pkg = tmp_path / "seeder"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "__init__.py").write_text("")
    (pkg / "data" / "_loader.py").write_text("def f():\n    from . import _elastic\n")
    (pkg / "data" / "_elastic.py").write_text("from seeder.data import _loader\n")
    assert import_cycles(pkg) == [["data._elastic", "data._loader"]]


def test_the_cycle_check_counts_imports_for_annotations(tmp_path):
    """A module that imports another's class under ``if TYPE_CHECKING:`` to annotate with it, while
    that module imports it back, is a cycle: take a narrow ``typing.Protocol`` of what it uses."""
    pkg = tmp_path / "seeder"
    (pkg / "_state").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_state" / "__init__.py").write_text("")
    (pkg / "_state" / "plan.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from seeder._seeding.core import Seeder\n"
    )
    (pkg / "_seeding").mkdir()
    (pkg / "_seeding" / "__init__.py").write_text("")
    (pkg / "_seeding" / "core.py").write_text("from seeder._state import plan\n")
    assert import_cycles(pkg) == [["_seeding.core", "_state.plan"]]


def test_known_exceptions_are_still_needed(owners):
    """An exception whose problem is gone must leave KNOWN (else it would hide the next one)."""
    stale = []
    for (rule, module), known in KNOWN.items():
        path = next((p for p in MODULES if module_name(p) == module), None)
        found = (
            []
            if path is None
            else RULES[rule](
                path, PKG, **({"owners": owners} if rule == "private_attributes" else {})
            )
        )
        stale += [f"{rule} {module}: {k!r}" for k in known if not any(k in p for p in found)]
    assert not stale, f"fixed: remove from KNOWN in tests/test_architecture.py: {stale}"


# A bad package: each module breaks one rule, and the good module breaks none.
BAD = {
    "_seeding/__init__.py": "",
    "_state/__init__.py": "",
    "_seeding/derive.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
    "_errors.py": "class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES,
    "_checks.py": "from ._seeding.derive import _hidden\n",
    "_seeding/rngs.py": "from . import derive\n\n\ndef f():\n    return derive._hidden\n",
    "_seeding/core.py": "from .. import _errors\nfrom . import derive\n",
    "_seeding/participant.py": (
        "import importlib\nPLUGINS = {'dali': 'seeder.data.dali'}\n\n\n"
        "def load(name):\n    return importlib.import_module(PLUGINS[name])\n"
    ),
    "_state/format.py": "import importlib\n\n\ndef f():\n    return "
    "importlib.import_module('seeder._seeding.core')\n",
    "_state/plan.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
    "    from .._seeding.core import Seeder\n",
    "data/__init__.py": "",
    "data/_order.py": "from ._permutation import keyed\n\n__all__ = ['keyed', 'shard']\n\n\ndef "
    "shard():\n    pass\n",
    "data/_permutation.py": (
        "import importlib\nimport sys\n\n"
        "sys.modules[__name__] = importlib.import_module('seeder.data._order')\n"
    ),
    "data/dali.py": "x = 1\n",
    "data/_sampler.py": "class Sampler:\n    def __init__(self):\n        self._seeder = None\n",
    "data/_loader.py": (
        "class Loader:\n    def __init__(self, sampler):\n        self._seeder = "
        "sampler._seeder\n\n\ndef default():\n    from .._seeding import core\n    return core\n"
    ),
    "data/_batches.py": "def f():\n    from .. import default_seeder\n    return "
    "default_seeder()\n",
    "data/_audit.py": "import gc\nimport sys\n\n\ndef caller():\n    return "
    "sys._getframe(1).f_locals, gc.get_referrers(caller)\n",
    "_run/__init__.py": "",
    "_run/steps.py": "from .._seeding import core\n",
    "verify/__init__.py": "",
    "_state/pending.py": "def watch():\n    from .._run import steps\n    return steps\n",
    "data/_workers.py": "import sys\n\nTOOL = 'seeder.verify'\n\n\ndef f():\n    return "
    "sys.modules.get(TOOL)\n",
}
EXPECTED = {  # rule -> (bad module, a word of the problem it must report)
    "size": ("_seeding.derive", "lines"),
    "exports": ("data._order", "__all__ lists keyed, defined elsewhere"),
    "class_size": ("_errors", "class Big"),
    "private_imports": ("_checks", "_hidden from seeder._seeding.derive"),
    "private_attributes": ("data._loader", "._seeder (also defined in seeder.data._sampler"),
    "one_way": ("_seeding.participant", "imports seeder.data.dali"),
    "stack_reads": ("data._audit", "reads .get_referrers"),
}


@pytest.fixture
def bad_package(tmp_path):
    pkg = tmp_path / "seeder"
    for name, text in BAD.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    (pkg / "__init__.py").write_text("")
    return pkg


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_fails_on_a_bad_module(bad_package, rule):
    """Every rule finds its planted problem, and nothing in the clean module (``core`` imports a
    lower layer)."""
    module, word = EXPECTED[rule]
    path = bad_package.joinpath(*module.split(".")).with_suffix(".py")
    found = problems(rule, path, bad_package)
    assert any(word in p for p in found), (rule, found)
    assert not problems(rule, bad_package / "_seeding" / "core.py", bad_package)


def test_the_checks_see_upward_string_and_same_named_imports(bad_package):
    """Upward ``from .. import``, string imports and a private read through a same-named
    attribute."""
    one_way = {
        name: problems("one_way", bad_package.joinpath(*name.split("/")), bad_package)
        for name in (
            "data/_batches.py",
            "_state/format.py",
            "_state/plan.py",
            "_seeding/participant.py",
            "data/_loader.py",
        )
    }
    assert one_way["data/_batches.py"] == ["line 2: imports seeder.__init__"]
    assert one_way["_state/format.py"] == ["line 5: imports seeder._seeding.core"]
    assert one_way["_state/plan.py"] == []  # under TYPE_CHECKING: for annotations only
    assert "line 2: imports seeder.data.dali" in one_way["_seeding/participant.py"]
    assert one_way["data/_loader.py"] == []  # the core is below data
    # the core never imports a tool: in a function, or through a string whatever reads it
    assert problems("one_way", bad_package / "_state" / "pending.py", bad_package) == [
        "line 2: imports seeder._run.steps, a tool (the core emits seeder._hooks)"
    ]
    assert problems("one_way", bad_package / "data" / "_workers.py", bad_package) == [
        "line 3: names seeder.verify, a tool"
    ]
    assert problems("one_way", bad_package / "_run" / "steps.py", bad_package) == []  # tools: up
    assert problems("private_imports", bad_package / "_seeding" / "rngs.py", bad_package) == [
        "line 5: derive._hidden (seeder._seeding.derive)"
    ]
    assert problems("exports", bad_package / "data" / "_permutation.py", bad_package) == [
        "line 4: replaces itself in sys.modules"
    ]
    assert (
        layer("integrations.lightning")
        > layer("data._loader")
        > layer("_seeding.core")
        > layer("_state.plan")
        > layer("_seeding.rngs")
        > layer("_seeding.derive")
    )


PLAIN_RUN = """
import json, os, sys, tempfile, torch, seeder
from seeder import _hooks
seeder.init(1)
seeder.reseed(1, 0)
model = torch.nn.Linear(2, 1)
for num_workers in (0, 2):
    loader = seeder.DataLoader(
        torch.arange(8.0), batch_size=2, shuffle=True, num_workers=num_workers
    )
    for batch in loader:
        model(batch.unsqueeze(1).repeat(1, 2)).sum().backward()
ckpt = seeder.Checkpoint(os.path.join(tempfile.mkdtemp(), "last.pt"), model=model)
ckpt.step()
ckpt.save()
ckpt.resume()
ckpt.resume(True)
print(json.dumps({
    "tools": sorted(m for m in sys.modules if m.split(".")[:2] in TOOLS),
    "other_site": os.environ.get("OTHER_SITE"),
    "listening": _hooks.listening(_hooks.STEP),
}))
"""


@pytest.fixture(scope="module")
def other_site(tmp_path_factory):
    """A directory with another ``sitecustomize.py``, which sets ``OTHER_SITE=1``."""
    other = tmp_path_factory.mktemp("other")
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = '1'\n")
    return other


@pytest.fixture(scope="module")
def plain_run(other_site):
    """A plain run (no tool's variable; :data:`PLAIN_RUN`) in a fresh interpreter, another
    ``sitecustomize`` on its ``PYTHONPATH``: its last line."""
    tools = [["seeder", "verify"], ["seeder", "env"], ["seeder", "_run"]]
    code = PLAIN_RUN.replace("TOOLS", repr(tools))
    out = run_python(["-c", code], env={"PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{other_site}"})
    return json.loads(out.stdout.splitlines()[-1])


def test_a_plain_run_loads_no_tool(plain_run):
    """``init``, ``reseed``, a loader's pass without workers and with 2, a checkpoint's step, save
    and resume: no module of ``seeder.verify``, ``seeder.env`` or ``seeder._run`` is imported (a
    fresh interpreter)."""
    assert plain_run["tools"] == []


def test_the_tools_hooks_are_installed_in_the_runs_they_start(tmp_path, other_site, plain_run):
    """A run started with the tools' ``sitecustomize`` first on ``PYTHONPATH`` (what verify and
    locate give their runs) has their callbacks; the next ``sitecustomize`` on the path still
    runs. A plain run (:func:`plain_run`) has none, and the other ``sitecustomize`` runs too."""
    from seeder._run.bootstrap import run_environment

    steps = tmp_path / "steps.jsonl"
    code = (
        "import os, seeder; from seeder import _hooks; seeder.init(1); "
        "print(os.environ.get('OTHER_SITE'), _hooks.listening(_hooks.STEP))"
    )
    env = run_environment({"PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{other_site}"})
    out = run_python(["-c", code], env={**env, "SEEDER_STEPS": str(steps)}).stdout
    assert out.split() == ["1", "True"] and '"seeder_run":"init"' in steps.read_text()
    assert (plain_run["other_site"], plain_run["listening"]) == ("1", False)
