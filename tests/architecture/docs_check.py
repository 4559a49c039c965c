#!/usr/bin/env python3
"""The documentation's links resolve and the README stays an entry (issue 48 item 6).

Checks, for README.md, docs/*.md and resources/format.md:
- every relative link and image names a file that exists, and every #anchor a heading of that file
  (GitHub's rule: lower case, punctuation other than '-' and '_' dropped, spaces to '-', repeats
  numbered -1, -2, ...);
- README.md has at most README_MAX_LINES lines (the reference lives in docs/);
- every reference from the sources of the form `docs/NAME.md "Section"` (comments and help texts
  point into docs/ this way) names a heading of that file that contains "Section", and no source
  points at a README section any more (`README "Section"`).

Usage: docs_check.py ROOT | --self-test
"""
import pathlib
import re
import sys
import tempfile

README_MAX_LINES = 300
DOCS = ("README.md", "docs/*.md", "resources/format.md")
SOURCES = ("core", "analysis", "app", "python", "tests", "scripts", "resources", "docs")
SOURCE_SUFFIXES = {".cpp", ".h", ".py", ".sh", ".txt", ".cmake", ".c", ".md"}
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^(#{1,6}) +(.*?) *#*$", re.M)
# Also inside C and C++ string literals, where the quotes are escaped (\"Section\").
DOC_REFERENCE = re.compile(r"(docs/[A-Z_]+\.md),? \\?\"([^\"\\]+)\\?\"")
README_REFERENCE = re.compile(r"README,? \\?\"([^\"\\]+)\\?\"")
# A reference may be wrapped: a line break and the next line's comment marker read as one space.
LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*(?://+|#+|\*+(?!/))?[ \t]*")


def joined_lines(text):
    """The text with each line break (and the comment marker after it) as one space, and for each
    of its characters the offset of the same character in the text."""
    parts, offsets, pos = [], [], 0
    for m in LINE_BREAK.finditer(text):
        parts.append(text[pos:m.start()] + " ")
        offsets.extend(range(pos, m.start() + 1))
        pos = m.end()
    parts.append(text[pos:])
    offsets.extend(range(pos, len(text)))
    return "".join(parts), offsets


def anchor_of(heading):
    text = re.sub(r"`|\*\*?", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path):
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [m.group(2) for m in HEADING.finditer(text)]


def anchors(path):
    seen, out = {}, set()
    for heading in headings(path):
        base = anchor_of(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def doc_files(root):
    files = []
    for pattern in DOCS:
        files += sorted(root.glob(pattern))
    return files


def check_links(root):
    problems = []
    for doc in doc_files(root):
        text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), doc.read_text(encoding="utf-8"))
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            line = text[: m.start()].count("\n") + 1
            where = f"{doc.relative_to(root)}:{line}"
            path_part, _, fragment = target.partition("#")
            linked = (doc.parent / path_part).resolve() if path_part else doc
            if not linked.exists():
                problems.append(f"{where}: the link '{target}' names a file that does not exist")
                continue
            if fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                problems.append(f"{where}: the link '{target}' names no heading of {linked.name}")
    readme = root / "README.md"
    lines = readme.read_text(encoding="utf-8").count("\n")
    if lines > README_MAX_LINES:
        problems.append(f"README.md: {lines} lines, more than {README_MAX_LINES}: move reference text into docs/")
    return problems


def check_source_references(root):
    problems = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file() or path.resolve() == pathlib.Path(__file__).resolve():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            where = path.relative_to(root)
            flat, offsets = joined_lines(text)
            for m in README_REFERENCE.finditer(flat):
                line = text[: offsets[m.start()]].count("\n") + 1
                problems.append(f"{where}:{line}: points at README \"{m.group(1)}\"; the reference is in docs/")
            for m in DOC_REFERENCE.finditer(flat):
                doc = root / m.group(1)
                line = text[: offsets[m.start()]].count("\n") + 1
                if not doc.exists():
                    problems.append(f"{where}:{line}: {m.group(1)} does not exist")
                elif not any(m.group(2).lower() in h.replace("`", "").lower() for h in headings(doc)):
                    problems.append(f"{where}:{line}: {m.group(1)} has no heading \"{m.group(2)}\"")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "app").mkdir()
        (root / "README.md").write_text("# T\n\n[ok](docs/A.md#two-words) [bad](docs/A.md#nothing) [gone](docs/B.md)\n"
                                        "```\n[in a fence](nowhere.md)\n```\n")
        (root / "docs" / "A.md").write_text("# A\n\n## Two `words`\n\n[back](../README.md#t)\n")
        (root / "app" / "x.cpp").write_text('// docs/A.md "Two words"; docs/A.md "Three"; README "Old"\n'
                                            '"see docs/A.md \\"Two words\\"; docs/A.md \\"Four\\"; README \\"Escaped\\""\n'
                                            '// wrapped: docs/A.md "Two\n// words"; README\n// "Wrapped"; docs/A.md\n// "Five"\n')
        problems = check_links(root) + check_source_references(root)
        expected = ["names no heading of A.md", "names a file that does not exist", 'has no heading "Three"',
                    'points at README "Old"', 'has no heading "Four"', 'points at README "Escaped"',
                    'x.cpp:4: points at README "Wrapped"', 'x.cpp:5: docs/A.md has no heading "Five"']
        missing = [e for e in expected if not any(e in p for p in problems)]
        if missing or len(problems) != len(expected):
            print("self-test failed: expected", expected, "got", problems)
            return 1
        (root / "README.md").write_text("# T\n" + "line\n" * (README_MAX_LINES + 1))
        if not any("more than" in p for p in check_links(root)):
            print("self-test failed: a long README passed")
            return 1
    print("docs_check self-test: every planted problem found")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(argv[1]).resolve()
    problems = check_links(root) + check_source_references(root)
    for p in problems:
        print(p)
    print(f"docs_check: {len(doc_files(root))} documents, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
