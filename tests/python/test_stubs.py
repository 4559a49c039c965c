"""The type stubs (attnlens/__init__.pyi, issue 50 item 5) say what the module takes.

Each long call's keyword parameters in the stub are exactly the options the module accepts (its
own list, as its refusal of an unknown keyword names it); every public name of the module, Dump and
Head is in the stub, and the stub names nothing the module lacks. dir(attnlens) lists the exporter's
names, which load on first use.
"""
import ast
import inspect
import os
import pathlib
import re

import pytest

import attnlens

EXAMPLE = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "resources", "examples",
                                        "attnlens-example.h5"))


def stub():
    path = pathlib.Path(attnlens.__file__).with_name("__init__.pyi")
    assert path.is_file(), "the stubs are not installed beside the package"
    assert path.with_name("py.typed").is_file(), "py.typed (PEP 561) is not installed beside the package"
    return ast.parse(path.read_text(encoding="utf-8"))


def stub_class(tree, name):
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def stub_function(cls, name):
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def allowed_keywords(call):
    with pytest.raises(attnlens.UsageError) as e:
        call()
    return re.search(r"\(allowed: (.*)\)", str(e.value)).group(1).split(", ")


def test_keyword_parameters_are_the_modules_options():
    tree = stub()
    dump = attnlens.open(EXAMPLE)
    head = dump.head(0, 0, 0)
    calls = {
        ("Dump", "analyze"): lambda: dump.analyze(no_such_option=1),
        ("Dump", "claims"): lambda: dump.claims(no_such_option=1),
        ("Dump", "sweep"): lambda: dump.sweep("mala", "qscale=1:2:2", no_such_option=1),
        ("Dump", "locality"): lambda: dump.locality(no_such_option=1),
        ("Dump", "rollout"): lambda: dump.rollout(0, "cls", no_such_option=1),
        ("Head", "statistics"): lambda: head.statistics("softmax", no_such_option=1),
    }
    for (cls, name), call in calls.items():
        fn = stub_function(stub_class(tree, cls), name)
        in_stub = [a.arg for a in fn.args.kwonlyargs]
        assert sorted(in_stub) == sorted(allowed_keywords(call)), (cls, name)


def test_every_public_name_is_in_the_stub_and_only_those():
    tree = stub()
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    top |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target]}
    # Submodules an earlier import loaded (attnlens.attnlens_export) are not the module's names.
    loaded = vars(attnlens)
    public = {n for n in dir(attnlens)
              if not n.startswith("_") and not (n in loaded and inspect.ismodule(loaded[n]))} | {"__version__"}
    assert public - top == set(), "in the module, not in the stub"
    for cls in (attnlens.Dump, attnlens.Head):
        body = stub_class(tree, cls.__name__).body
        named = {n.name for n in body if isinstance(n, ast.FunctionDef)}
        runtime = {n for n in dir(cls) if not n.startswith("_")}
        assert runtime - named == set(), (cls.__name__, "missing in the stub")
        assert {n for n in named if not n.startswith("_")} - runtime == set(), (cls.__name__, "not in the module")


def test_dir_lists_the_lazily_loaded_names():
    names = dir(attnlens)
    for n in ("Exporter", "validate", "LayerSpec", "exporter", "open", "Dump", "Head"):
        assert n in names
