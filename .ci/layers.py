#!/usr/bin/env python3
"""Checks that the crate's layers only point down and that each control is
used through its facade alone.

Reads every `use` tree and every `crate::`, `super::` or `self::` path in
src/ (comments and string literals left out) and resolves it to the
top-level module it names. Fails, naming the file and line, on:

1. a top-level module that is in no layer of LAYERS below;
2. a module that names one in a higher layer (an edge pointing up);
3. an import cycle between top-level modules, even within one layer;
4. a path into a control's submodule (`crate::rate::cell::...`) from
   outside the control's folder: outside it, a control is its `mod.rs`.

`--self-test` runs the check on a copy of src/ with a cycle put in, then
with a leak put in, and fails unless the check fails on each.

The check is textual, not a compiler: a path spelled through a `use` alias
of a module (`use crate::rate as r; r::cell::X`) is not seen. The compiler
already refuses that one, since the controls' submodules are private; this
check keeps them so and says why when someone makes one visible again.
"""

import os
import re
import shutil
import sys
import tempfile

# Lowest first. A module may name modules of its own layer or below.
LAYERS = [
    ("ground", ["clock", "sync", "priority", "deadline", "error", "outcome", "registry", "test_warnings"]),
    ("controls", ["rate", "throttle", "bulkhead", "retry_budget", "store"]),
    ("core", ["key", "events", "metrics", "core", "permit", "retry", "metered"]),
    ("manager", ["manager", "builder", "config"]),
    ("edges", ["status", "edge", "grpc", "client", "server", "database"]),
]
CONTROLS = ["rate", "throttle", "bulkhead", "retry_budget"]


def blank(match):
    """A comment or literal as the newlines it spans, so lines still count."""
    return "\n" * match.group(0).count("\n")


def stripped(text):
    text = re.sub(r"/\*.*?\*/", blank, text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', blank, text)
    return re.sub(r'"(?:\\.|[^"\\])*"', blank, text)


def use_paths(tree):
    """The paths of one use tree (`a::{b, c::{self, D}}`), as segment lists."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        path = re.sub(r"\s+as\s+\w+$", "", tree).strip()
        return [[s for s in path.split("::") if s]]
    prefix = [s for s in tree[:brace].split("::") if s.strip()]
    prefix = [s.strip() for s in prefix]
    body = tree[brace + 1 : tree.rindex("}")]
    parts, depth, part = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        part += ch
    parts.append(part)
    paths = []
    for part in filter(str.strip, parts):
        for path in use_paths(part):
            paths.append(prefix if path == ["self"] else prefix + path)
    return paths


def paths_in(text):
    """Every path the file names, with its line: `(line, [segments])`."""
    text = stripped(text)
    line_of = lambda at: text.count("\n", 0, at) + 1
    uses = list(re.finditer(r"\buse\s+([^;]*);", text))
    found = []
    for use in uses:
        found += [(line_of(use.start()), path) for path in use_paths(use.group(1))]
    for path in re.finditer(r"\b(?:crate|super|self)(?:\s*::\s*\w+)+", text):
        if not any(use.start() <= path.start() < use.end() for use in uses):
            segments = re.sub(r"\s", "", path.group(0)).split("::")
            found.append((line_of(path.start()), segments))
    return found


def module_of(src, file):
    """The module path of a file: src/a/b.rs and src/a/b/mod.rs are [a, b]."""
    parts = os.path.relpath(file, src)[: -len(".rs")].split(os.sep)
    if parts[-1] == "mod":
        parts.pop()
    return [] if parts == ["lib"] else parts


def resolved(module, path):
    """The module path `path` names from `module`; None for other crates."""
    if path[0] == "crate":
        return path[1:]
    if path[0] not in ("super", "self"):
        return None
    here, rest = list(module), list(path)
    while rest and rest[0] in ("super", "self"):
        if rest.pop(0) == "super":
            here.pop()
    return here + rest


def check(src):
    problems = []
    layer_of = {m: at for at, (_, mods) in enumerate(LAYERS) for m in mods}
    tops = sorted(
        f[: -len(".rs")] if f.endswith(".rs") else f
        for f in os.listdir(src)
        if f != "lib.rs" and (f.endswith(".rs") or os.path.isdir(os.path.join(src, f)))
    )
    for top in tops:
        if top not in layer_of:
            problems.append(f"src/{top}: in no layer; add it to LAYERS in .ci/layers.py")
    submodules = {
        c: {f[: -len(".rs")] if f.endswith(".rs") else f for f in os.listdir(os.path.join(src, c))}
        - {"mod"}
        for c in CONTROLS
        if os.path.isdir(os.path.join(src, c))
    }
    edges = {}  # (from, to) -> first "file:line"
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            file = os.path.join(root, name)
            module = module_of(src, file)
            if not module:
                continue
            shown = os.path.relpath(file, os.path.dirname(src))
            with open(file, encoding="utf-8") as f:
                text = f.read()
            for line, path in paths_in(text):
                target = resolved(module, path)
                if not target or target[0] not in tops or target[0] == module[0]:
                    continue
                edges.setdefault((module[0], target[0]), f"{shown}:{line}")
                control = target[0]
                if len(target) > 1 and target[1] in submodules.get(control, ()):
                    problems.append(
                        f"{shown}:{line}: uses {'::'.join(target)}, inside the control "
                        f"{control}; outside src/{control}/ use what its mod.rs re-exports"
                    )
    for (a, b), where in sorted(edges.items()):
        if a in layer_of and b in layer_of and layer_of[b] > layer_of[a]:
            problems.append(
                f"{where}: {a} ({LAYERS[layer_of[a]][0]}) names {b} "
                f"({LAYERS[layer_of[b]][0]}), a layer above it"
            )
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    for cycle in cycles(graph):
        steps = " -> ".join(cycle + [cycle[0]])
        wheres = ", ".join(edges[(cycle[i], cycle[(i + 1) % len(cycle)])] for i in range(len(cycle)))
        problems.append(f"import cycle {steps} ({wheres})")
    return problems


def cycles(graph):
    """One cycle through each strongly connected set of modules (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(path_within(graph, set(members), min(members)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def path_within(graph, members, start):
    """A shortest cycle from `start` back to itself within `members`."""
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == start:
                return path
            if nxt in members and nxt not in seen:
                seen.add(nxt)
                paths.append(path + [nxt])
    return [start]


def self_test(src):
    plants = [
        ("a layer pointing up", "rate/mod.rs", "use crate::manager::ThrottleManager as _;", "a layer above"),
        ("a cycle within a layer", "grpc.rs", "use crate::edge::Passage as _;", "import cycle"),
        ("a leak", "core/mod.rs", "use crate::rate::cell::RateCell as _;", "inside the control"),
    ]
    for what, file, line, said in plants:
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "src")
            shutil.copytree(src, copy)
            with open(os.path.join(copy, file), "a", encoding="utf-8") as f:
                f.write("\n" + line + "\n")
            problems = check(copy)
            caught = [p for p in problems if said in p]
            if not caught:
                print(f"self-test: the check missed {what} put into src/{file}: {problems}")
                return 1
            print(f"self-test: {what} (src/{file}) fails the check: {caught[0]}")
    return 0


def main(args):
    if args[:1] == ["--self-test"]:
        return self_test(args[1] if len(args) > 1 else "src")
    src = args[0] if args else "src"
    problems = check(src)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print("layers: every module names only its layer or below, no import cycle, "
          "every control used through its facade")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
