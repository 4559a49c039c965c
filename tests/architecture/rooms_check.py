"""The include rules of docs/ARCHITECTURE.md ("Rooms"), checked on the source tree:

- core/ includes nothing of analysis/, app/ or python/; analysis/ nothing of app/ or python/;
  app/common nothing of app/cli or app/gui; neither core/ nor analysis/ includes Qt.
- core's folders (include/attnlens/<folder> and src/<folder>) are layered io <- math <- attention <-
  dump: a folder includes its own and lower folders' headers only, and every include of a core
  header names its folder ("attnlens/dump/dump.h"), wherever it is.
- app/gui's rooms: document/ (Session and its stores) includes no views/, plot/ or shell/ header
  and no widget (QCustomPlot's data classes only, for results built off the GUI thread); plot/
  includes no document/, views/ or shell/ header (plot helpers know no Session); views/ includes
  no shell/ header. Every app/gui include names its room ("document/session.h").

    python3 tests/architecture/rooms_check.py [ROOT]     # exit 1 listing every broken rule
    python3 tests/architecture/rooms_check.py --self-test  # the check finds planted violations
"""
import os
import re
import shutil
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
WIDGETS = re.compile(r'^(QWidget|QDialog|QMainWindow|QLabel|QPushButton|QApplication|QtWidgets|QComboBox|'
                     r'QCheckBox|QSpinBox|QLineEdit|QMenu|QAction|QToolBar|QDockWidget|QScrollArea|QLayout|'
                     r'QVBoxLayout|QHBoxLayout|QGridLayout|QFormLayout|QFileDialog|QMessageBox)$')
ROOMS = ("document", "plot", "views", "shell")
CORE_LAYERS = ("io", "math", "attention", "dump")
CORE_INCLUDE = re.compile(r"^attnlens/([a-z_0-9]+)(/|\.h$)")


def sources(root, folder):
    base = os.path.join(root, folder)
    for dirpath, _, files in os.walk(base):
        for f in files:
            if f.endswith((".h", ".cpp")):
                yield os.path.join(dirpath, f)


def includes(path):
    with open(path, encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def check(root):
    problems = []

    def bad(path, what):
        problems.append(f"{os.path.relpath(path, root)}: {what}")

    for folder, forbidden in (("core", ("attnlens/analysis/", "app/", "python/")),
                              ("analysis", ("app/", "python/")),
                              ("app/common", ("cli/", "gui/", "document/", "views/", "shell/", "plot/"))):
        for path in sources(root, folder):
            for kind, name in includes(path):
                if any(name.startswith(f) for f in forbidden):
                    bad(path, f"includes {name} ({folder}/ may not)")
                if folder in ("core", "analysis") and kind == "<" and (name.startswith("Q") or name.startswith("qt")):
                    bad(path, f"includes Qt's {name} ({folder}/ is tested headless)")
    for folder in ("core", "analysis", "app", "python", "tests"):
        for path in sources(root, folder):
            for kind, name in includes(path):
                m = CORE_INCLUDE.match(name) if kind == '"' else None
                if m and m.group(1) != "analysis" and (m.group(2) != "/" or m.group(1) not in CORE_LAYERS):
                    bad(path, f'includes "{name}" without its core folder ({", ".join(CORE_LAYERS)})')
    for layer, folder in enumerate(CORE_LAYERS):
        for base in (os.path.join("core", "include", "attnlens", folder), os.path.join("core", "src", folder)):
            for path in sources(root, base):
                for kind, name in includes(path):
                    m = CORE_INCLUDE.match(name) if kind == '"' else None
                    if m and m.group(1) in CORE_LAYERS and CORE_LAYERS.index(m.group(1)) > layer:
                        bad(path, f"includes {name} (core's {folder}/ may include "
                                  f"{', '.join(CORE_LAYERS[:layer + 1])} only)")
    for base in (os.path.join("core", "include", "attnlens"), os.path.join("core", "src")):
        top = os.path.join(root, base)
        for f in (os.listdir(top) if os.path.isdir(top) else []):
            if f.endswith((".h", ".cpp")):
                bad(os.path.join(top, f), f"lies outside core's folders ({', '.join(CORE_LAYERS)})")
    gui = os.path.join(root, "app", "gui")
    allowed = {"document": ("document/",), "plot": ("plot/",), "views": ("document/", "plot/", "views/"),
               "shell": ROOMS}
    top = [f for f in os.listdir(gui) if f.endswith((".h", ".cpp"))] if os.path.isdir(gui) else []
    for f in top:
        bad(os.path.join(gui, f), "lies outside the rooms of app/gui (document, plot, views, shell)")
    for room in ROOMS:
        for path in sources(root, os.path.join("app", "gui", room)):
            for kind, name in includes(path):
                if kind == '"' and not name.startswith("attnlens/"):
                    target = name.split("/")[0] if "/" in name else None
                    if target not in ROOMS:
                        bad(path, f'includes "{name}" without its room (write "<room>/{name}")')
                    elif not name.startswith(allowed[room]):
                        bad(path, f"includes {name} ({room}/ may include {', '.join(allowed[room])} only)")
                if room == "document" and kind == "<" and WIDGETS.match(name):
                    bad(path, f"includes the widget header {name} (document/ holds no widgets)")
    return problems


def self_test():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    with tempfile.TemporaryDirectory() as tmp:
        for folder in ("core", "analysis", os.path.join("app", "common"), os.path.join("app", "gui"), "python"):
            shutil.copytree(os.path.join(root, folder), os.path.join(tmp, folder),
                            ignore=shutil.ignore_patterns("*.txt", "*.cmake"))
        if check(tmp):
            print("rooms_check self-test: the copied tree already breaks a rule", file=sys.stderr)
            return 1
        planted = {
            os.path.join("core", "src", "io", "planted.cpp"): '#include "attnlens/analysis/report.h"\n',
            os.path.join("analysis", "src", "planted.cpp"): "#include <QString>\n",
            os.path.join("app", "gui", "document", "planted.cpp"): '#include "views/plot_view.h"\n#include <QWidget>\n',
            os.path.join("app", "gui", "plot", "planted.h"): '#include "document/session.h"\n',
            os.path.join("app", "gui", "views", "planted.h"): '#include "shell/main_window.h"\n#include "session.h"\n',
            os.path.join("app", "gui", "planted.h"): "\n",
            os.path.join("core", "include", "attnlens", "io", "planted.h"): '#include "attnlens/attention/window.h"\n',
            os.path.join("core", "src", "math", "planted.cpp"): '#include "attnlens/dump/dump.h"\n',
            os.path.join("core", "src", "loose.cpp"): "\n",
            os.path.join("python", "planted.cpp"): '#include "attnlens/tensor.h"\n',
        }
        for rel, text in planted.items():
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(tmp)
        expected = 12
        if len(found) != expected:
            print(f"rooms_check self-test: {len(found)} problems found in the planted tree, expected {expected}:",
                  *found, sep="\n  ", file=sys.stderr)
            return 1
    print(f"rooms_check self-test: the {expected} planted violations are found")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    problems = check(root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"rooms_check: {len(problems)} include rule(s) broken (docs/ARCHITECTURE.md, Rooms)", file=sys.stderr)
        return 1
    print("rooms_check: every include keeps to its room")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
