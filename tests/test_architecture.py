"""The layout of DESIGN.md, checked on the source: module size, private names, one-way imports."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "seeder"
MODULES = sorted(p for p in PKG.rglob("*.py"))

# Layers from the bottom up; a module may import its own layer or a lower one. The first matching prefix wins.
LAYERS = [
    ("errors", 0), ("checks", 0), ("derive", 0), ("fastrng", 0), ("rngbase", 1), ("rngs_torch", 1), ("rngs", 1),
    ("distributed", 1),
    ("participant", 2), ("registry", 2), ("rollback", 2), ("state", 2), ("trace", 2), ("digest", 2), ("core", 3),
    ("env", 1), ("verify", 2), ("data", 4), ("integrations", 5), ("cli", 6), ("__init__", 6), ("__main__", 6),
    ("pyt", 6),
]
ALIASES = {"sampler", "permutation", "workers", "dali", "determinism", "launcher", "environment"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"] or ["__init__"]
    return ".".join(parts)


def layer(name: str) -> int:
    head = name.split(".")[0]
    for prefix, level in LAYERS:
        if head == prefix:
            return level
    if head in ALIASES:
        return 6
    raise AssertionError(f"seeder.{name} is not in the layout of DESIGN.md; add it to tests/test_architecture.py")


def imported(path: Path):
    """(module imported, names taken from it, line) for every import of a seeder module in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("seeder"):
                target = node.module[len("seeder."):] if node.module != "seeder" else ""
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}".strip(".")
                yield (sub if (PKG / sub.replace(".", "/")).with_suffix(".py").exists()
                       or (PKG / sub.replace(".", "/")).is_dir() else target), alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("seeder."):
                    yield alias.name[len("seeder."):], "*", node.lineno


def test_modules_are_small():
    big = [f"{p.relative_to(PKG.parent)}: {len(p.read_text().splitlines())} lines" for p in MODULES
           if len(p.read_text().splitlines()) > 420]
    assert not big, f"modules over ~400 lines (one concept per file): {big}"


def test_classes_are_small():
    big = []
    for p in MODULES:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno > 260:
                big.append(f"{p.name}:{node.name} ({node.end_lineno - node.lineno} lines)")
    assert not big, f"classes over ~250 lines: {big}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_names_across_modules(path):
    here = module_name(path)
    bad = []
    for target, name, line in imported(path):
        if target != here and name.startswith("_") and not name.startswith("__"):
            bad.append(f"line {line}: {name} from seeder.{target}")
    tree = ast.parse(path.read_text())
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__") and node.value.id != "self":
            if (PKG / f"{node.value.id}.py").exists() or (PKG / path.parent.name / f"{node.value.id}.py").exists():
                bad.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    assert not bad, f"seeder.{here} uses private names of other modules: {bad}"


# Private names of other libraries that seeder must read (documented where used).
# torch._C (the privateuse1 backend's name), random._inst and np.random.mtrand._rand (the global RNG objects),
# DALI's _enable_checkpointing/_pipes (read behind fallbacks in seeder/data/dali.py), sys._getframe (the
# sampler recognises torchdata's StatefulDataLoader by its caller).
THIRD_PARTY_PRIVATE = {"_C", "_get_privateuse1_backend_name", "_inst", "_rand", "_enable_checkpointing", "_pipes",
                       "_getframe"}


def own_private_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_")}


def _on_self(node):
    """``self._x``: a subclass of a framework class (transformers' Trainer) using what it inherits."""
    return isinstance(node.value, ast.Name) and node.value.id == "self"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_attributes_of_other_modules_objects(path):
    """``obj._x`` where ``_x`` is not defined in this module reaches into another module's internals."""
    tree = ast.parse(path.read_text())
    mine = own_private_names(tree) | THIRD_PARTY_PRIVATE
    bad = [f"line {n.lineno}: .{n.attr}" for n in ast.walk(tree)
           if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
           and n.attr not in mine and not _on_self(n)]
    assert not bad, f"seeder.{module_name(path)} reads private attributes defined elsewhere: {bad}"


def seeder_imports(path):
    """(this module, seeder module it imports, line), aliases and self-imports left out."""
    here = module_name(path)
    for target, _, line in imported(path):
        if target and target != here and here.split(".")[0] not in ALIASES:
            yield here, target, line


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_one_way(path):
    bad = []
    for here, target, line in seeder_imports(path):
        mine, theirs = here.split(".")[0], target.split(".")[0]
        if mine == theirs:
            continue
        if theirs == "integrations" or layer(theirs) > layer(here) \
                or {mine, theirs} == {"data", "env"} or (mine in ("env", "verify") and theirs in ("core", "state", "data")):
            bad.append(f"line {line}: seeder.{here} imports seeder.{target}")
    assert not bad, f"imports against the one-way order of DESIGN.md: {bad}"


def test_the_check_can_fail(tmp_path):
    """The walker sees a private import and an upward import (a test that cannot fail is a defect)."""
    fake = PKG / "derive.py"
    tree_imports = list(imported(fake))
    assert all(t.split(".")[0] in ("errors", "checks", "derive") for t, _, _ in tree_imports)
    assert layer("core") > layer("state") > layer("rngs") > layer("derive")
    assert layer("integrations.lightning") > layer("data.loader") > layer("core")
