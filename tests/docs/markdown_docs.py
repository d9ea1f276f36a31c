"""Reading the repository's Markdown the way the docs tests need it: fenced blocks with the tag line
before them, relative links and the anchors GitHub makes from headings, backticked repository paths.

The rules the tests enforce (docs/testing.md, "The docs tier"):

- A relative link `[text](path#anchor)` (or a reference definition `[label]: path`) must name a file or
  folder of the repository, and its anchor a heading (or an explicit `id`/`name`) of the Markdown file
  it names. Links inside code spans and fenced blocks are text, not links; `http(s):`/`mailto:` are not
  checked.
- A fenced block is a shell block when its info string is `sh`, `bash`, `shell`, `console`, `zsh` or
  `shell-session`, or when it has no info string and looks like shell: a line starts with a `$ ` prompt,
  or its first line that is not blank or a `#` comment starts with `./`, `.venv/`, an environment
  assignment (`NAME=...`) or one of SHELL_WORDS. A fence with another info string (`toml`, `text`,
  `json`, ...) is not shell.
- A shell block carries, on the nearest non-blank line before its fence, either
  `<!-- run-by: tests/<path>.py::<test> -->` naming a test that exists and really runs it (the generic
  runner `run_blocks_named`, or a test whose source names every program the block runs), or
  `<!-- not-run: <reason> -->` with a reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = {"sh", "bash", "shell", "console", "zsh", "shell-session"}
SHELL_WORDS = (
    "sudo", "nri-pinner", "kubectl", "systemctl", "dpkg", "apt", "apt-get", "python", "python3", "pip",
    "git", "cd", "export", "make", "pytest", "ctr", "crictl", "skopeo", "curl", "journalctl", "man",
)
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
TAG = re.compile(r"^\s*<!--\s*(?P<kind>run-by|not-run):\s*(?P<value>.*?)\s*-->\s*$")
RUN_BY = re.compile(r"^(?P<path>tests/[\w./-]+\.py)::(?P<name>\w+(?:::\w+)?)$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^\s{0,3}(?P<hashes>#{1,6})\s+(?P<text>.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+[^>]*(?:name|id)=\"(?P<id>[^\"]+)\"")
REPO_PATH = re.compile(r"`(?P<path>(?:nri_pinner|tests|scripts|packaging|docs|benchmarks|testkit|examples|protos)"
                       r"/[\w.-]+(?:/[\w.-]+)*/?)`")
# A path inside the package, written without `nri_pinner/` (`service/core/passes.py`, `engine/admission_engine.py`).
PACKAGE_PATH = re.compile(r"`(?P<path>(?:service|core|engine|nri|edge|config|cli)/[\w.-]+(?:/[\w.-]+)*\.py)`")
# Where a package-relative path may live: the package, and (until the package's reorganisation) its
# service/ folder, which held the node core as service/core/.
PACKAGE_ROOTS = ("nri_pinner", "nri_pinner/service")
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Block:
    """A fenced block: where it opens (1-based line), its info string, its text, and its tag line."""

    line: int
    info: str
    text: str
    tag: str | None  # the nearest non-blank line before the fence, stripped

    @property
    def language(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""

    def is_shell(self) -> bool:
        if self.language:
            return self.language in SHELL_LANGUAGES
        lines = [line.strip() for line in self.text.splitlines()]
        if any(line.startswith("$ ") for line in lines):
            return True
        first = next((line for line in lines if line and not line.startswith("#")), "")
        if first.startswith(("./", ".venv/")) or ENV_ASSIGNMENT.match(first):
            return True
        word = first.split()[0] if first else ""
        return word in SHELL_WORDS

    def programs(self) -> list[str]:
        """The program each command line runs (after environment assignments and a `$ ` prompt)."""
        found = []
        for raw in self.text.splitlines():
            line = raw.strip().removeprefix("$ ")
            if not line or line.startswith("#"):
                continue
            words = line.split()
            while words and ENV_ASSIGNMENT.match(words[0]):
                words.pop(0)
            if words:
                found.append(words[0])
        return found


def markdown_files(root: Path = REPO) -> list[Path]:
    """Every Markdown file the docs tests read: README, CHANGELOG, docs/, benchmarks/, tests/."""
    files = [root / "README.md", root / "CHANGELOG.md", root / "benchmarks" / "README.md"]
    files += sorted((root / "docs").rglob("*.md")) + sorted((root / "tests").rglob("*.md"))
    return [f for f in files if f.is_file()]


def split_fences(text: str) -> tuple[list[Block], list[tuple[int, str]]]:
    """The fenced blocks of `text`, and every line outside them (1-based number, text)."""
    blocks: list[Block] = []
    outside: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None or (opened["fence"][0] == "`" and "`" in opened["info"]):
            outside.append((i + 1, lines[i]))
            i += 1
            continue
        fence = opened["fence"]
        closing = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), None)
        blocks.append(Block(i + 1, opened["info"].strip(), "\n".join(lines[i + 1:end]), before))
        i = end + 1
    return blocks, outside


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed, spaces → -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown text has: its headings' slugs (repeats get -1, -2, ...) and HTML ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    _, outside = split_fences(text)
    for _, line in outside:
        found.update(m["id"] for m in HTML_ID.finditer(line))
        heading = HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading["text"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[tuple[int, str]]:
    """Every link target outside code: (line, target)."""
    _, outside = split_fences(text)
    found = []
    for number, line in outside:
        bare = CODE_SPAN.sub("", line)
        found += [(number, m["target"]) for m in INLINE_LINK.finditer(bare)]
        ref = REFERENCE_DEF.match(bare)
        if ref:
            found.append((number, ref["target"]))
    return found


def wrong_links(path: Path, root: Path = REPO) -> list[str]:
    """The relative links of the Markdown file `path` that name no file, or no anchor of it."""
    problems = []
    text = path.read_text()
    where = path.relative_to(root)
    for number, target in links(text):
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if file_part and (not dest.exists() or root.resolve() not in (dest, *dest.parents)):
            problems.append(f"{where}:{number}: {target}: no such file in the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            problems.append(f"{where}:{number}: {target}: no heading makes #{anchor}")
    return problems


def defined_tests(source: str) -> dict[str, str]:
    """Test functions of a test file, by pytest id (`name`, `Class::name`), with their source."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found[node.name] = ast.get_source_segment(source, node) or ""
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    found[f"{node.name}::{item.name}"] = ast.get_source_segment(source, item) or ""
    return found


def wrong_shell_blocks(path: Path, root: Path = REPO) -> list[str]:
    """The shell blocks of `path` without a valid tag, or whose run-by test does not exist or run them."""
    problems = []
    where = path.relative_to(root)
    blocks, _ = split_fences(path.read_text())
    for block in blocks:
        if not block.is_shell():
            continue
        tag = TAG.match(block.tag or "")
        at = f"{where}:{block.line}"
        if tag is None:
            problems.append(f"{at}: shell block without <!-- run-by: tests/...::test --> or <!-- not-run: reason -->")
        elif tag["kind"] == "not-run":
            if not tag["value"]:
                problems.append(f"{at}: not-run without a reason")
        else:
            problems += [f"{at}: {p}" for p in wrong_run_by(tag["value"], block, root)]
    return problems


def wrong_run_by(value: str, block: Block, root: Path) -> list[str]:
    cited = RUN_BY.match(value)
    if cited is None:
        return [f"run-by {value!r} is not tests/<path>.py::<test>"]
    file = root / cited["path"]
    if not file.is_file():
        return [f"run-by {value}: no such file"]
    tests = defined_tests(file.read_text())
    if cited["name"] not in tests:
        return [f"run-by {value}: no such test in that file"]
    source = tests[cited["name"]]
    if "run_blocks_named(" in source:
        return []  # the generic runner: it runs every block that names it
    missing = [p for p in block.programs() if p not in source]
    return [f"run-by {value}: the test never names {', '.join(missing)}"] if missing else []


def wrong_repo_paths(path: Path, root: Path = REPO) -> list[str]:
    """Backticked repository paths in `path` that do not exist: `nri_pinner/...`, `tests/...`, `scripts/...`
    and the other top-level folders (a name without its `.py` is the module: `examples/pin_fixed`), and
    package paths written without `nri_pinner/` (`service/core/passes.py`). Placeholders (`<...>`, `*`, `...`),
    `:line` suffixes and paths in fenced blocks are not checked."""
    problems = []
    where = path.relative_to(root)
    _, outside = split_fences(path.read_text())
    for number, line in outside:
        for m in REPO_PATH.finditer(line):
            candidate = m["path"].rstrip("/")
            if "..." in candidate:
                continue  # a placeholder: `nri_pinner/...`
            if not ((root / candidate).exists() or (root / f"{candidate}.py").is_file()):
                problems.append(f"{where}:{number}: `{m['path']}`: no such path")
        for m in PACKAGE_PATH.finditer(line):
            if not any((root / package / m["path"]).is_file() for package in PACKAGE_ROOTS):
                problems.append(f"{where}:{number}: `{m['path']}`: no such file in the package")
    return problems


def run_blocks_named(test_id: str, root: Path = REPO) -> list[tuple[Path, Block]]:
    """The shell blocks tagged `<!-- run-by: <test_id> -->`, in every Markdown file."""
    found = []
    for path in markdown_files(root):
        blocks, _ = split_fences(path.read_text())
        for block in blocks:
            tag = TAG.match(block.tag or "")
            if block.is_shell() and tag and tag["kind"] == "run-by" and tag["value"] == test_id:
                found.append((path, block))
    return found
