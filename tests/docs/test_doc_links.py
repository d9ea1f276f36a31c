"""Every relative link in the repository's Markdown names a file that exists, and its #anchor a heading
of that file (GitHub's slugs); the checker itself is tested on sample texts."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_docs import REPO, anchors, markdown_files, slug, wrong_links

FILES = markdown_files()


def test_the_docs_this_checks_are_found() -> None:
    names = {str(f.relative_to(REPO)) for f in FILES}
    assert {"README.md", "CHANGELOG.md", "benchmarks/README.md", "docs/install.md"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert wrong_links(path) == []


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (REPO / "README.md").read_text()
    top = sorted(p.relative_to(REPO) for p in (REPO / "docs").glob("*.md"))
    assert [str(p) for p in top if f"]({p})" not in readme] == []
    design = REPO / "docs" / "design"
    index = (design / "architecture.md").read_text()
    assert [p.name for p in sorted(design.glob("*.md")) if p.name != "architecture.md"
            and f"]({p.name})" not in index] == []


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize(("heading", "expected"), [
    ("Pool changes", "pool-changes"),
    ("NIC alignment (`hints.providers = [\"cpu\", \"nics\"]`)", "nic-alignment-hintsproviders--cpu-nics"),
    ("Migrating from the kubelet's static policy", "migrating-from-the-kubelets-static-policy"),
    ("Placement rules, against kubelet v1.32.10", "placement-rules-against-kubelet-v13210"),
    ("Ordering — no window", "ordering--no-window"),
    ("`nri-pinner run`: one per socket", "nri-pinner-run-one-per-socket"),
    ("See [the docs](docs/x.md) now", "see-the-docs-now"),
    ("snake_case_kept", "snake_case_kept"),
])
def test_slugs_are_githubs(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_repeated_headings_are_numbered_and_fenced_ones_are_not_headings() -> None:
    text = "# A\n## Notes\n### Notes\n```sh\n# not a heading\n```\n<a id=\"here\"></a>\n"
    assert anchors(text) == {"a", "notes", "notes-1", "here"}


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Bee\n## Two words\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "# A\n[ok](b.md#two-words) [self](#a) [web](https://example.com/x) [dir](../docs)\n"
        "[gone](c.md) [bad anchor](b.md#three) [bad self](#nope) `[in code](nowhere.md)`\n"
        "```\n[in a fence](nowhere.md)\n```\n[ref]: b.md#bee\n[badref]: ../../outside.md\n")
    assert wrong_links(page, tmp_path) == [
        "docs/a.md:3: c.md: no such file in the repository",
        "docs/a.md:3: b.md#three: no heading makes #three",
        "docs/a.md:3: #nope: no heading makes #nope",
        "docs/a.md:8: ../../outside.md: no such file in the repository",
    ]
