"""The shape of the code: modules and lines per package, import arrows, cycles, longest chain.

Run ``.venv/bin/python bench/structure.py`` from the repository root (about 2 s), or with
``--at REV`` to measure a commit (read with ``git archive`` into a temporary directory), so
a restructure can be shown before and after in one run. Not a timing: a map in numbers,
read with ``grimp`` (the graph import-linter checks the contracts on).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from io import BytesIO
from pathlib import Path

import grimp

PACKAGES = ("resourcesync", "rsclient", "hub", "publisher", "subscriber", "rshub", "source")


def _unit(module: str) -> str:
    """The package a module counts under: the hub by layer, the others as a whole."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "hub" and len(parts) > 1 else parts[0]


def _longest_chain(graph: grimp.ImportGraph, modules: set[str]) -> list[str]:
    """The longest import path without repeats, over the graph with cycles cut (DFS order)."""
    memo: dict[str, list[str]] = {}
    on_path: set[str] = set()

    def walk(module: str) -> list[str]:
        if module in memo:
            return memo[module]
        on_path.add(module)
        best: list[str] = []
        for target in sorted(graph.find_modules_directly_imported_by(module) & modules):
            if target in on_path:
                continue
            chain = walk(target)
            if len(chain) > len(best):
                best = chain
        on_path.discard(module)
        memo[module] = [module, *best]
        return memo[module]

    sys.setrecursionlimit(10_000)
    return max((walk(m) for m in sorted(modules)), key=len)


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    imported = graph.find_modules_directly_imported_by(target) & modules
                    work.append((target, iter(sorted(imported))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def measure(root: Path) -> None:
    sys.path.insert(0, str(root))
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = set(graph.modules)
    lines: Counter[str] = Counter()
    count: Counter[str] = Counter()
    biggest: list[tuple[int, str]] = []
    for module in modules:
        path = root / Path(*module.split("."))
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        n = len(file.read_text().splitlines()) if file.exists() else 0
        lines[_unit(module)] += n
        count[_unit(module)] += 1
        biggest.append((n, module))
    arrows = sum(len(graph.find_modules_directly_imported_by(m) & modules) for m in modules)
    print(f"source at {root}")
    print(f"{'package':<16}{'modules':>8}{'lines':>8}")
    for unit in sorted(count):
        print(f"{unit:<16}{count[unit]:>8}{lines[unit]:>8}")
    print(f"{'all':<16}{sum(count.values()):>8}{sum(lines.values()):>8}")
    print(f"import arrows between the project's modules: {arrows}")
    cycles = _cycles(graph, modules)
    print(f"import cycles: {len(cycles)}" + "".join(f"\n  {' <-> '.join(c)}" for c in cycles))
    chain = _longest_chain(graph, modules)
    print(f"longest import chain: {len(chain)} modules: {' > '.join(chain)}")
    print("largest modules: " + ", ".join(f"{m} {n}" for n, m in sorted(biggest)[-5:][::-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", help="a git revision to measure instead of the work tree")
    args = parser.parse_args()
    if args.at is None:
        measure(Path.cwd())
        return
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.at, *PACKAGES], capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        measure(Path(tmp))


if __name__ == "__main__":
    main()
