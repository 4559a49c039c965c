"""No function of the product is longer than 80 lines (docs/ARCHITECTURE.md "Rules that hold everywhere").

Scans the .cpp and .h files of core/, analysis/, app/ and python/. A function is a body in braces
whose head (the text since the last ';', '{' or '}') holds a closing parenthesis, at namespace or
class scope: free functions, member functions (in their class or out of it), PYBIND11_MODULE and
lambdas defined at namespace scope. A lambda inside a function counts as part of it. Its length
runs from the first line of its head to its closing brace, comments and blank lines included.
Comments, string and character literals are blanked first, so braces in them do not count.

Tables of data written as a function are allowed by name in ALLOWED, each with its reason.

    python3 tests/architecture/long_functions.py [ROOT]       # exit 1 listing every long function
    python3 tests/architecture/long_functions.py --list [ROOT] # every function over 40 lines, longest first
    python3 tests/architecture/long_functions.py --self-test  # the scan measures planted functions right
"""
import os
import re
import sys
import tempfile

LIMIT = 80
FOLDERS = ("core", "analysis", "app", "python")
# file (relative to the root) and function name: why it may be longer.
ALLOWED = {
    ("app/cli/commands.cpp", "commands"): "the commands' table (one entry per command: name, summary, options)",
}

RAW_STRING = re.compile(r'R"([^(\s]{0,16})\((.*?)\)\1"', re.S)
CLASS_HEAD = re.compile(r"\b(class|struct|union|enum)\b[^()]*$", re.S)
NAMESPACE_HEAD = re.compile(r"^\s*(inline\s+)?namespace\b[^()]*$|^\s*extern\s*\"\"\s*$", re.S)
# A brace initialiser of a member in a constructor's initialiser list: ") : a_(x), b_{".
MEMBER_BRACE_INIT = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?:\s*[\w:]+.*[\w>]\s*$", re.S)
ACCESS = re.compile(r"^(\s*(public|private|protected|Q_SLOTS|Q_SIGNALS|signals|slots)(\s+(Q_SLOTS|slots))?\s*:(?!:)|\s*Q_OBJECT\b)+")
NAME = re.compile(r"([~\w:]+|operator\s*\S+)\s*\((?![^()]*\)\s*\()")


def blank(text):
    """Comments and literals replaced by spaces (newlines kept, so line numbers hold)."""
    text = RAW_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    # Preprocessor lines (#if defined(X) holds a parenthesis), continued lines included.
    lines = "".join(out).split("\n")
    continued = False
    for k, line in enumerate(lines):
        directive = continued or line.lstrip().startswith("#")
        continued = directive and line.rstrip().endswith("\\")
        if directive:
            lines[k] = " " * len(line)
    return "\n".join(lines)


def matching(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def functions(text):
    """(name, first line, last line) of every function at namespace or class scope."""
    code = blank(text)
    line_of = lambda at: code.count("\n", 0, at) + 1
    found = []
    head_start = 0
    i = 0
    while i < len(code):
        c = code[i]
        if c in ";}":
            head_start = i + 1
        elif c == "{":
            head = code[head_start:i]
            if NAMESPACE_HEAD.search(head) or CLASS_HEAD.search(head):
                head_start = i + 1  # scopes whose insides are scanned too
            elif ")" in head and MEMBER_BRACE_INIT.search(head):
                i = matching(code, i)  # b_{y} inside an initialiser list: the head goes on
            elif ")" in head:
                end = matching(code, i)
                signature = ACCESS.sub(lambda m: " " * len(m.group(0)), head)
                first = head_start + len(signature) - len(signature.lstrip())
                names = NAME.findall(head)
                found.append((names[0].strip() if names else head.strip()[:40], line_of(first), line_of(end)))
                i = end
                head_start = i + 1
            else:
                i = matching(code, i)  # an initialiser: = {...}, kTable{{...}}
                head_start = i + 1
        i += 1
    return found


def scan(root):
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
                rel = os.path.relpath(path, root)
                for name, first, last in functions(text):
                    yield rel, name, first, last - first + 1


def check(root, listing=False):
    rows = sorted(scan(root), key=lambda r: -r[3])
    if listing:
        for rel, name, first, length in rows:
            if length > 40:
                print(f"{length:4d}  {rel}:{first}  {name}")
        return 0
    long = [r for r in rows if r[3] > LIMIT and (r[0], r[1].split("::")[-1]) not in ALLOWED]
    for rel, name, first, length in long:
        print(f"{rel}:{first}: {name} is {length} lines (at most {LIMIT}): split it into named steps")
    return 1 if long else 0


def self_test():
    body = "\n".join(f"    x += {k};" for k in range(LIMIT))
    planted = (
        "#if defined(X)  // a } in a comment and a { in one\n"
        "namespace attnlens {\n"
        "namespace {\n"
        'const char* kOpen = "{";\n'
        "constexpr int kTable[] = {1, 2, 3};\n"
        "}  // namespace\n"
        "int shortOne(int a) { return a + '}'; }\n"
        f"int longOne(int x) {{\n{body}\n    return x;\n}}\n"
        "class Widget : public Base {\n"
        "public:\n"
        "    Widget() : a_(1), b_{2} {\n        auto f = [] { return 1; };\n    }\n"
        '    const char* raw() const { return R"(})"; }\n'
        "};\n"
        "}  // namespace attnlens\n"
        "#endif\n"
    )
    got = {name: (first, last) for name, first, last in functions(planted)}
    expected = {"shortOne": (7, 7), "longOne": (8, 10 + LIMIT), "Widget": (13 + LIMIT, 15 + LIMIT),
                "raw": (16 + LIMIT, 16 + LIMIT)}
    failures = [f"{k}: expected lines {v}, got {got.get(k)}" for k, v in expected.items() if got.get(k) != v]
    extra = sorted(set(got) - set(expected))
    if extra:
        failures.append(f"functions found that are none: {extra}")
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "core", "src"))
        with open(os.path.join(root, "core", "src", "planted.cpp"), "w", encoding="utf-8") as f:
            f.write(planted)
        if check(root) != 1:
            failures.append("the planted long function was not reported")
    for f in failures:
        print("self-test:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--self-test"]:
        sys.exit(self_test())
    listing = args[:1] == ["--list"]
    if listing:
        args = args[1:]
    sys.exit(check(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."), listing))
