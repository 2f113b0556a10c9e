#!/usr/bin/env python3
"""Check that the docs' links resolve (issue 40).

Usage: scripts/check-links.py [ROOT]

ROOT defaults to the repository (this script's parent's parent). Checked:
  - every relative link and image of README.md, docs/**/*.md and bench/results.md
    (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`, `[label]: path`): the file or
    folder must exist under ROOT, and the anchor must be a heading of the target file, named as
    GitHub names it (see slug());
  - every path `docs/….md` named in plain text there and in the source files (comments such as
    "docs/launcher.md, "Memory""): the file must exist.
Links outside ROOT (`../shared/…`), URLs (http:, https:, mailto:) and text in code blocks or code
spans are not checked. Prints one line per broken link, `FILE:LINE: what`, and exits 1 when there
is one, 0 otherwise.
"""
import os
import re
import sys
import unicodedata

SOURCE_EXTENSIONS = {".md", ".cpp", ".hpp", ".h", ".c", ".sh", ".py", ".cmake", ".proto", ".txt"}
SKIP_DIRS = {".git", "build", "node_modules"}
SKIP_PATHS = {os.path.join("tests", "docs")}  # the checker's own test and fixtures, broken on purpose
# Other projects' docs named in our text (not files of ours): path -> whose.
UPSTREAM_DOCS = {"docs/uefi.md": "Cloud Hypervisor's"}

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+.*)?$")
DOC_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?![\w/-])")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR_TAG = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
FENCE = re.compile(r"^\s{0,3}(```|~~~)")


def slug(text):
    """GitHub's anchor for a heading: the rendered text (markup gone), lower-cased; every
    character that is not a letter, digit, mark, connector ('_'), space or '-' removed; each space
    a '-'. Duplicates get -1, -2… (done by the caller)."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)  # images: their alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)  # emphasis markers (a single '_' is kept)
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch == " ":
            out.append("-")
        elif ch == "-" or ch == "_" or cat[0] in ("L", "N", "M"):
            out.append(ch)
    return "".join(out)


def strip_code_spans(line):
    return re.sub(r"(`+)(?:(?!\1).)*?\1", lambda m: " " * len(m.group(0)), line)


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks, code spans blanked."""
    fenced = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if fenced is None:
                    fenced = m.group(1)
                elif m.group(1) == fenced:
                    fenced = None
                continue
            if fenced is None:
                yield number, strip_code_spans(line.rstrip("\n"))


def markdown_files(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "bench", "results.md")]
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "docs")):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        files += [os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")
                             and os.path.relpath(os.path.join(dirpath, d), root) not in SKIP_PATHS)
        for n in sorted(filenames):
            if os.path.splitext(n)[1] in SOURCE_EXTENSIONS or n in ("Dockerfile", "CMakeLists.txt"):
                yield os.path.join(dirpath, n)


def raw_headings_anchors(path):
    """Anchors from the raw lines (slug() drops the backticks itself)."""
    found, seen, fenced = set(), {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = FENCE.match(line)
            if m:
                fenced = m.group(1) if fenced is None else (None if m.group(1) == fenced else fenced)
                continue
            if fenced is not None:
                continue
            for name in ANCHOR_TAG.findall(line):
                found.add(name)
            h = HEADING.match(line.rstrip("\n"))
            if not h:
                continue
            base = slug(h.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def check_link(root, src, number, target, problems):
    if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return  # a URL (http:, https:, mailto:…)
    path_part, _, anchor = target.partition("#")
    path_part = path_part.split("?", 1)[0]
    if path_part:
        resolved = os.path.normpath(os.path.join(os.path.dirname(src), path_part))
        if os.path.relpath(resolved, root).startswith(".."):
            return  # outside the repository (../shared/reference/…): not ours to check
        if not os.path.exists(resolved):
            problems.append(f"{os.path.relpath(src, root)}:{number}: {target}: no such file")
            return
    else:
        resolved = src
    if anchor and os.path.isfile(resolved) and resolved.endswith(".md"):
        if anchor not in raw_headings_anchors(resolved):
            problems.append(f"{os.path.relpath(src, root)}:{number}: {target}: no heading "
                            f"'#{anchor}' in {os.path.relpath(resolved, root)}")


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    checked = 0
    for src in markdown_files(root):
        after_paragraph = True  # a reference definition cannot interrupt a paragraph
        for number, line in prose_lines(src):
            targets = LINK.findall(line)
            m = REFERENCE.match(line)
            if m and after_paragraph:
                targets.append(m.group(1))
            after_paragraph = not line.strip() or bool(m and after_paragraph)
            for target in targets:
                checked += 1
                check_link(root, src, number, target, problems)
    for src in source_files(root):
        try:
            with open(src, encoding="utf-8") as f:
                lines = f.readlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, 1):
            for path in DOC_PATH.findall(line):
                checked += 1
                problem = f"{os.path.relpath(src, root)}:{number}: {path}: no such file"
                if (path not in UPSTREAM_DOCS and not os.path.isfile(os.path.join(root, path))
                        and problem not in problems):  # a link's target is named once
                    problems.append(problem)
    for p in problems:
        print(p)
    print(f"check-links: {checked} links checked under {root}, {len(problems)} broken",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
