"""The documentation runs: every ```python block of README.md and docs/*.md, and every relative link
resolves.

Each page's blocks run in order in one fresh ``python`` (cwd a temporary directory, this
checkout on ``PYTHONPATH``, no ``SEEDER_SEED``), so a page may build on its earlier
blocks. A block fenced ```python no-run is not run. Pages are found by glob: a new page
is covered without touching this file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import REPO_ROOT, ForkServer
from optional import EXTRAS, need_installed

# the pages run in one worker, forked from the module's one server
pytestmark = pytest.mark.xdist_group("docs")

PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
# A page whose code starts processes (DataLoader workers, torchrun, multiprocessing) is a slow test.
STARTS_PROCESSES = re.compile(
    r"num_workers\s*=\s*[1-9]|torchrun|multiprocessing|mp\.spawn|subprocess"
)
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")
LINK = re.compile(
    r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\((?P<image>[^)\s]+)\)"
)
# Pages linked from README/docs that are still being written: a missing one skips the link test
# instead of failing it. Empty: every linked page exists.
PENDING_PAGES: set[str] = set()


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line number, info string, code)`` of every fenced block of a Markdown text."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group("fence"), m.group("info").strip(), i + 1
        body = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence)
            and lines[i].strip() == fence[0] * len(lines[i].strip())
        ):
            body.append(lines[i])
            i += 1
        blocks.append((start, info, "\n".join(body) + "\n"))
        i += 1
    return blocks


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """The runnable blocks of a page: fenced ```python (not ```python no-run)."""
    out = []
    for line, info, code in code_blocks(page.read_text()):
        words = info.split()
        if words[:1] == ["python"] and "no-run" not in words[1:]:
            out.append((line, code))
    return out


#: What importing a module of seeder's (or a framework's part) needs beyond its own package.
ALSO_NEEDS = {
    "seeder.integrations.lightning": ("lightning",),
    "seeder.integrations.accelerate": ("accelerate",),
    "seeder.integrations.transformers": ("transformers", "accelerate"),
    "lightning.pytorch.cli": ("jsonargparse",),
    "transformers": ("accelerate",),
}
IMPORT = re.compile(r"^\s*(?:import|from)\s+([\w.]+)", re.M)


def optional_needs(blocks: list[tuple[int, str]]) -> list[str]:
    """The optional packages (``tests/optional.py``'s) a page's code imports, itself or through
    seeder."""
    names = {m for _, code in blocks for m in IMPORT.findall(code)}
    needs = {
        n.split(".")[0] if not n.startswith("nvidia.") else "nvidia.dali"
        for n in names
        if n.split(".")[0] in EXTRAS
    }
    for name in names:
        needs.update(ALSO_NEEDS.get(name, ()))
    return sorted(needs)


RUNNER = r"""
import sys, traceback
blocks = __BLOCKS__
scope = {"__name__": "__main__"}
for number, (line, code) in enumerate(blocks, 1):
    try:
        exec(compile(code, f"{__PAGE__}:block {number} (line {line})", "exec"), scope)
    except BaseException:
        sys.stderr.write(f"\n*** {__PAGE__}: block {number} (line {line}) failed\n")
        traceback.print_exc()
        sys.exit(1)
"""


def page_params() -> list[object]:
    params = []
    for page in PAGES:
        code = "".join(c for _, c in python_blocks(page))
        marks = [pytest.mark.slow] if STARTS_PROCESSES.search(code) else []
        params.append(pytest.param(page, id=str(page.relative_to(REPO_ROOT)), marks=marks))
    return params


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Each page's code runs as a script forked from one process that imported torch once
    (tests/helpers.py), in CI too: the subject is the pages' code, not a process start, and a fresh
    Python per page adds ~20 s to the suite."""
    forks = ForkServer(
        tmp_path_factory.mktemp("forks"),
        env={"PYTHONWARNINGS": ""},
        preload=["torch._dynamo", "torch._inductor.config"],
    )
    yield forks
    forks.close()


@pytest.mark.parametrize("page", page_params())
def test_page_code_runs(page: Path, tmp_path: Path, server: ForkServer) -> None:
    blocks = python_blocks(page)
    name = str(page.relative_to(REPO_ROOT))
    if not blocks:
        pytest.skip(f"{name} has no ```python block")
    need_installed(optional_needs(blocks), name)  # DALI under SEEDER_REQUIRE_DALI=1: fails instead
    script = RUNNER.replace("__BLOCKS__", repr(blocks)).replace("__PAGE__", repr(name))
    (tmp_path / "page.py").write_text(script)
    proc = server.run([tmp_path / "page.py"], cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, (
        f"{name}: exit {proc.returncode}\n--- stderr\n{proc.stderr[-6000:]}\n--- "
        f"stdout\n{proc.stdout[-2000:]}"
    )


def relative_links(page: Path) -> list[str]:
    """Link and image targets of a page outside code blocks that point into the repository."""
    text = page.read_text()
    for _, _, code in code_blocks(text):
        text = text.replace(code, "")
    targets = []
    for m in LINK.finditer(text):
        target = m.group("target") or m.group("image")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # URLs, mailto:, same-page anchors
        targets.append(target.split("#")[0])
    return targets


def test_relative_links_point_to_files() -> None:
    broken: list[str] = []
    pending: set[str] = set()
    for page in PAGES:
        for target in relative_links(page):
            path = (page.parent / target).resolve()
            if path.exists():
                continue
            rel = os.path.relpath(path, REPO_ROOT)
            if rel in PENDING_PAGES:
                pending.add(rel)
            else:
                broken.append(f"{page.relative_to(REPO_ROOT)} -> {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)
    if pending:
        pytest.skip("links to pages not merged yet: " + ", ".join(sorted(pending)))


def test_block_extraction_and_no_run_convention(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "text\n```python\na = 1\n```\n```python no-run\nraise SystemExit(1)\n```\n"
        "~~~bash\nls\n~~~\n````python\nb = '```'\n````\n"
    )
    assert python_blocks(page) == [(2, "a = 1\n"), (11, "b = '```'\n")]
    assert relative_links(REPO_ROOT / "README.md"), (
        "README.md links nowhere: the link test would check nothing"
    )


#: A private module or name of seeder (``seeder._x``, ``seeder.data._x``, ``seeder/env/_x.py``).
PRIVATE_PATH = re.compile(r"\bseeder(?:\.\w+)*\._[a-z]\w*|\bseeder(?:/\w+)*/_[a-z]\w*")
#: The maintainers' map of the package names its private modules.
MAPS = {"docs/layout.md", "docs/development.md"}


def test_user_docs_name_only_public_paths() -> None:
    found = [
        f"{rel}:{n}: {m.group(0)}"
        for path in [*PAGES, *(REPO_ROOT / "examples").glob("*.py")]
        if (rel := str(path.relative_to(REPO_ROOT))) not in MAPS
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in PRIVATE_PATH.finditer(line)
    ]
    listed = "\n".join(found)
    assert not found, f"private paths in user documentation (name a public one):\n{listed}"
    assert PRIVATE_PATH.search("from seeder.data._workers import x; see seeder/env/_redact.py")
    assert not PRIVATE_PATH.search("seeder.data.dali.track, seeder.__version__, seeder_state_0.pt")
