"""The graph of module-level imports inside a package, and its cycles (used by test_import_graph.py).

An edge ``a -> b`` means that importing module ``a`` executes module ``b`` at import time: ``import b``,
``from b import x`` and ``from pkg import b`` at module level (inside ``if``/``try`` too, but not under
``if TYPE_CHECKING``), plus the ``__init__`` of every package on ``b``'s dotted path below the root
(Python runs those first). The root package's ``__init__`` is left out: it is the public re-export
surface (lazy in pybuda) and importing any submodule runs it before anything else. Imports inside
functions are lazy by design and do not count.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Set


def _modules(root_dir: str, root: str) -> Dict[str, str]:
    mods = {}
    for dirpath, _, files in os.walk(root_dir):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(root_dir))[:-3].replace(os.sep, ".")
                mods[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return mods


def _targets(module: str, node: ast.AST, is_package: bool) -> List[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module if is_package else module.rsplit(".", 1)[0]
    if node.level:
        parts = base.split(".")
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        full = base + ("." + node.module if node.module else "")
    else:
        full = node.module or ""
    return [full] + [f"{full}.{alias.name}" for alias in node.names]


def imported_names(path: str, module: str) -> List[str]:
    """Every module (or ``module.name``) an ``import`` or ``from ... import`` in the file names, at module level
    or inside functions, relative imports resolved as if the file were ``module``. For checks that no code
    path of a layer reaches another, where lazy imports count too."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    return [target for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for target in _targets(module, node, is_package)]


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(root_dir: str) -> Dict[str, Set[str]]:
    """Module name -> the package modules it imports at module level (see the module docstring)."""
    root = os.path.basename(os.path.normpath(root_dir))
    mods = _modules(root_dir, root)
    graph: Dict[str, Set[str]] = {}
    for module, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_package = path.endswith("__init__.py")
        deps: Set[str] = set()

        def own_package(name: str) -> bool:  # a package this module is inside is already running
            return module.startswith(name + ".")

        def visit(body) -> None:
            for node in body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for target in _targets(module, node, is_package):
                        parts = target.split(".")
                        for k in range(2, len(parts) + 1):
                            name = ".".join(parts[:k])
                            if name in mods and name != module and not own_package(name):
                                deps.add(name)
                elif isinstance(node, ast.If) and not _is_type_checking(node.test):
                    visit(node.body)
                    visit(node.orelse)
                elif isinstance(node, ast.Try):
                    visit(node.body)
                    for handler in node.handlers:
                        visit(handler.body)
                    visit(node.orelse)
                    visit(node.finalbody)

        visit(tree.body)
        deps.discard(root)
        graph[module] = deps
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found
