"""Error and warning messages are short: one or two sentences, a docs link where more is needed.

The AST of every module under ``seeder/`` is walked for the messages given to ``raise X(...)``,
to any call of a class named ``...Error``, ``...Warning`` or ``...Exception``, and to
``warnings.warn(...)`` and ``warnings.warn_explicit(...)``. A message is measured as the user
reads it: string constants (implicit concatenation included), f-strings with each placeholder
counted as a short token, ``+``, ``%`` and ``.format``, the names of string constants and the
calls of functions that return one string (of the module, or imported from another), and the
names a function assigns once. A ``see docs/<page>.md#<anchor>`` link is not counted.

``KNOWN`` lists the messages allowed over the bounds for now (none);
``test_known_exceptions_are_still_needed`` fails once one is fixed. The anchor of every docs link
in a message names a heading of that page.
"""

import ast
import re
from pathlib import Path
from typing import Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

PKG = Path(__file__).resolve().parents[1] / "seeder"
MODULES = sorted(PKG.rglob("*.py"))

#: Characters a user reads in one message: about two sentences of an error line.
MAX_CHARS = 300
#: Sentences in one message; what does not fit goes to the docs, linked.
MAX_SENTENCES = 2
#: What a placeholder (``{value}``, ``%s``) counts as: a short value.
TOKEN = "<val>"

_LINK = re.compile(r"\s*\(?see (?:the )?docs/[\w/.-]+\.md(?:#[\w-]+)?\)?")
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z`'\"(])")
_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")
_PERCENT_FIELD = re.compile(r"%[-+ #0-9.]*[sdrifgx]")

# Known messages over the bounds, by module: {the message's first words: why it stays for now}.
# Remove an entry when its fix lands (test_known_exceptions_are_still_needed says when).
KNOWN: dict[str, dict[str, str]] = {}


def _module_strings(tree: ast.Module) -> tuple[dict[str, ast.expr], dict[str, ast.expr]]:
    """The module's string constants (``NAME = "..."``) and its functions whose body ends in
    ``return <one string>``, by name."""
    constants: dict[str, ast.expr] = {}
    functions: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                constants[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            constants[node.target.id] = node.value
        elif isinstance(node, ast.FunctionDef) and node.body:
            last = node.body[-1]
            if isinstance(last, ast.Return) and last.value is not None:
                functions[node.name] = last.value
    return constants, functions


def _imported(tree: ast.Module) -> dict[str, Path]:
    """``name -> module file`` for each ``from seeder.<module> import name``."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seeder."):
            path = PKG.joinpath(*node.module.split(".")[1:]).with_suffix(".py")
            if path.exists():
                found.update({a.asname or a.name: path for a in node.names})
    return found


def _locals(function: ast.AST) -> dict[str, ast.expr]:
    """The names a function assigns exactly once, and what to."""
    seen: dict[str, list[ast.expr]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    seen.setdefault(target.id, []).append(node.value)
    return {name: values[0] for name, values in seen.items() if len(values) == 1}


class Reader:
    """Reads the text of a message expression of one module, placeholders as :data:`TOKEN`."""

    def __init__(self, tree: ast.Module):
        self.constants, self.functions = _module_strings(tree)
        self.imported = _imported(tree)
        self.local: dict[str, ast.expr] = {}
        self._others: dict[Path, Reader] = {}

    def other(self, name: str) -> Optional["Reader"]:
        """The reader of the seeder module ``name`` was imported from."""
        path = self.imported.get(name)
        if path is None:
            return None
        if path not in self._others:
            self._others[path] = Reader(ast.parse(path.read_text(), str(path)))
        return self._others[path]

    def text(self, node: ast.expr, depth: int = 0) -> Optional[str]:
        """The message ``node`` builds, or ``None`` when it is not a string this reader follows."""
        if depth > 4:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else TOKEN for v in node.values)
        if isinstance(node, ast.BinOp):
            return self._binop(node, depth)
        if isinstance(node, ast.IfExp):
            both = [self.text(node.body, depth + 1), self.text(node.orelse, depth + 1)]
            return max((t for t in both if t is not None), key=len, default=None)
        if isinstance(node, ast.Name):
            return self._name(node.id, depth)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        return None

    def _name(self, name: str, depth: int) -> Optional[str]:
        value = self.local.get(name, self.constants.get(name))
        if value is not None:
            return self.text(value, depth + 1)
        other = self.other(name)
        if other is not None and name in other.constants:
            return other.text(other.constants[name], depth + 1)
        return None

    def _binop(self, node: ast.BinOp, depth: int) -> Optional[str]:
        left = self.text(node.left, depth + 1)
        if isinstance(node.op, ast.Mult) and left is not None:
            times = node.right
            if isinstance(times, ast.Constant) and isinstance(times.value, int):
                return left * times.value
            return None
        if isinstance(node.op, ast.Mod) and left is not None:
            return _PERCENT_FIELD.sub(TOKEN, left)
        if isinstance(node.op, ast.Add):
            right = self.text(node.right, depth + 1)
            if left is None and right is None:
                return None
            return (left if left is not None else TOKEN) + (right if right is not None else TOKEN)
        return None

    def _call(self, node: ast.Call, depth: int) -> Optional[str]:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            base = self.text(func.value, depth + 1)
            return None if base is None else _FORMAT_FIELD.sub(TOKEN, base)
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self.text(self.functions[func.id], depth + 1)
        other = self.other(func.id) if isinstance(func, ast.Name) else None
        if other is not None and func.id in other.functions:
            return other.text(other.functions[func.id], depth + 1)
        return None


def _callee(node: ast.Call) -> str:
    func = node.func
    return (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )


def _is_message_call(node: ast.Call) -> bool:
    """A call that takes a message first: an exception or warning class, or ``warnings.warn``."""
    name = _callee(node)
    if name in ("warn", "warn_explicit"):
        return ast.unparse(node.func) in (f"warnings.{name}", name)
    return name.endswith(("Error", "Warning", "Exception", "Interrupt", "Exit"))


def messages(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every message a module gives to an exception, a warning,
    ``warnings.warn`` or ``warnings.warn_explicit``."""
    tree = ast.parse(path.read_text(), str(path))
    reader = Reader(tree)
    found = {}
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]
    for scope in scopes:  # the innermost function's names win: it is read last
        reader.local = _locals(scope) if scope is not tree else {}
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and _is_message_call(node) and node.args:
                text = reader.text(node.args[0])
                if text is not None:
                    found[node.lineno] = text
    return sorted(found.items())


def measure(text: str) -> tuple[int, int]:
    """``(characters, sentences)`` of a message, its docs link left out."""
    plain = _LINK.sub("", text).strip()
    sentences = len(_SENTENCE_END.findall(plain.rstrip(".!? "))) + 1 if plain else 0
    return len(plain), sentences


def too_long(text: str) -> bool:
    chars, sentences = measure(text)
    return chars > MAX_CHARS or sentences > MAX_SENTENCES


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PKG).with_suffix("").parts)


def offenders(path: Path) -> list[tuple[int, str]]:
    """The messages of ``path`` over the bounds, less the known ones."""
    known = KNOWN.get(module_name(path), {})
    return [
        (line, text)
        for line, text in messages(path)
        if too_long(text) and not any(text.startswith(k) for k in known)
    ]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_messages_are_one_or_two_sentences(path):
    bad = [
        f"line {line}: {measure(text)[0]} characters, {measure(text)[1]} sentences: {text[:80]!r}"
        for line, text in offenders(path)
    ]
    assert not bad, (
        f"seeder.{module_name(path)}: messages over {MAX_CHARS} characters or {MAX_SENTENCES} "
        f"sentences (say what was wrong and what to do; link docs/<page>.md#<anchor> for more): "
        f"{bad}"
    )


def test_known_exceptions_are_still_needed():
    """A known message that is short now (or gone) must leave KNOWN."""
    stale = []
    for module, known in KNOWN.items():
        path = PKG.joinpath(*module.split(".")).with_suffix(".py")
        found = [t for _, t in messages(path) if too_long(t)] if path.exists() else []
        stale += [f"{module}: {k!r}" for k in known if not any(t.startswith(k) for t in found)]
    assert not stale, f"fixed: remove from KNOWN in tests/test_messages.py: {stale}"


BAD = """
import warnings

LONG = "A constant message goes on. " * 4


class StateError(Exception):
    pass


def message(n):
    return f"the {n} things are wrong. Do this. Then do that as well."


def f(x):
    if x:
        raise ValueError(f"bad {x}. " "Pass another one. " "Or a third sentence here.")
    if x is None:
        raise StateError(LONG)
    warnings.warn("%s is " % x + "x" * 10 + "y" * 300)
    err = RuntimeError(message(x))
    raise StateError("fine: one sentence, then a link (see docs/state.md#what-is-validated)")
"""


def test_the_check_reads_each_way_a_message_is_built(tmp_path):
    """Implicit concatenation and f-strings, a module constant, ``%`` and ``+``, a function that
    returns the message: each is read, and a short message with a docs link passes."""
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    found = {line: text for line, text in messages(path)}
    assert found[17] == f"bad {TOKEN}. Pass another one. Or a third sentence here."
    assert found[19] == "A constant message goes on. " * 4
    assert found[20].startswith(f"{TOKEN} is xxxxxxxxxxyyy")
    assert found[21] == f"the {TOKEN} things are wrong. Do this. Then do that as well."
    assert [line for line, text in found.items() if too_long(text)] == [17, 19, 20, 21]
    assert measure(found[22]) == (len("fine: one sentence, then a link"), 1)


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("one thing; another, e.g. len(x) or 3.5", 1),
        ("It failed. Pass x=1.", 2),
        ("It failed. Pass x=1. Or y.", 3),
        ("state['a'] is 2.0 (see docs/x.md). Fix it", 2),
    ],
)
def test_sentences_end_at_a_stop_before_a_capital(text, sentences):
    assert measure(text)[1] == sentences


WORD = st.text(alphabet="abcdefghij_'[]()0123456789=", min_size=1, max_size=8)
SENTENCE = st.builds(
    lambda first, rest: " ".join([first.capitalize(), *rest]) + ".",
    st.sampled_from(["Pass", "Call", "The", "Resume", "Load"]),
    st.lists(WORD, max_size=6),
)


@given(sentences=st.lists(SENTENCE, min_size=1, max_size=5), link=st.booleans())
def test_a_message_counts_its_sentences_and_characters_less_its_link(sentences, link):
    text = " ".join(sentences)
    shown = f"{text[:-1]} (see docs/checkpoints.md#another-world-size)." if link else text
    chars, count = measure(shown)
    assert count == len(sentences)
    assert chars == len(text)


_DOCS_LINK = re.compile(r"see (?:the )?docs/(?P<page>[\w/.-]+\.md)(?:#(?P<anchor>[\w-]+))?")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them (code blocks left out)."""
    found, fence = set(), None
    for line in page.read_text().splitlines():
        opening = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if opening:
            mark = opening.group(1)
            fence = None if fence and mark.startswith(fence) else fence or mark
            continue
        heading = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).lower())
            found.add(text.replace(" ", "-"))
    return found


def test_docs_links_in_messages_point_at_a_heading():
    """``see docs/<page>.md#<anchor>`` in a message: the page exists and has that heading."""
    docs = PKG.parent / "docs"
    bad = []
    for path in MODULES:
        for line, text in messages(path):
            for m in _DOCS_LINK.finditer(text):
                page = docs / m.group("page")
                if not page.exists():
                    bad.append(f"{module_name(path)}:{line}: no docs/{m.group('page')}")
                elif m.group("anchor") and m.group("anchor") not in anchors(page):
                    bad.append(f"{module_name(path)}:{line}: no heading #{m.group('anchor')}")
    assert not bad, f"docs links in messages that lead nowhere: {bad}"


def test_anchors_are_githubs(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "# What `seeder.DataLoader` refuses, and why\n```python\n# not a heading\n```\n"
    )
    assert anchors(page) == {"what-seederdataloader-refuses-and-why"}
