#!/usr/bin/env python3
"""The size of the public surface, counted so that it cannot creep back.

Counts the non-deprecated public methods of `ThrottleManager` and of
`ThrottleManagerBuilder` (every inherent `impl` block under src/), the names
at the crate root (public modules, and items re-exported or declared there,
leaving out `#[doc(hidden)]` ones and the doctest-only README struct), and
the words of the guide (docs/guide/*.md, code blocks included). Prints each
count beside its ceiling and fails if any is over.

    python3 .ci/surface.py            # print and check
    python3 .ci/surface.py --list     # and name what is counted
    python3 .ci/surface.py --self-test
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CEILINGS = {
    "ThrottleManager methods": 24,
    "ThrottleManagerBuilder methods": 24,
    "crate root names": 26,
    "guide words": 9_000,
}


def methods(sources, type_name):
    """(name, deprecated) of each `pub fn` in the inherent impls of `type_name`."""
    found = []
    head = re.compile(r"^impl(<.*>)?\s+" + type_name + r"\b(<.*>)?\s*(where\b.*)?\{?\s*$")
    for text in sources:
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            if head.match(lines[i].strip()) and " for " not in lines[i]:
                i = _block(lines, i, found)
            i += 1
    return found


def _block(lines, start, found):
    depth, opened, attributes, in_attribute = 0, False, [], 0
    i = start
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if opened and depth == 1:
            if in_attribute:
                attributes[-1] += stripped
                in_attribute += stripped.count("[") - stripped.count("]")
            elif stripped.startswith("#["):
                attributes.append(stripped)
                in_attribute = stripped.count("[") - stripped.count("]")
            elif stripped.startswith("//") or not stripped:
                pass
            else:
                name = re.match(r"pub (const )?(async )?fn (\w+)", stripped)
                if name:
                    deprecated = any(a.startswith("#[deprecated") for a in attributes)
                    found.append((name.group(3), deprecated))
                attributes = []
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line.split("//")[0])
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth == 0:
            return i
        i += 1
    return i


def root_names(lib):
    """The names a reader meets at the crate root."""
    names, hidden, doctest_only = [], False, False
    statement, depth = "", 0
    for line in lib.split("\n"):
        stripped = line.strip()
        code = stripped.split("//")[0]
        in_use = statement or re.match(r"(pub )?use ", stripped)
        outer = depth
        if not in_use:
            depth += code.count("{") - code.count("}")
        if outer > 0 or stripped.startswith("//"):
            continue
        if statement:
            statement += " " + stripped
        elif stripped.startswith("#[doc(hidden)]"):
            hidden = True
            continue
        elif stripped.startswith("#[cfg(doctest)]"):
            doctest_only = True
            continue
        elif stripped.startswith("pub use ") or re.match(r"pub (mod|struct|enum|fn|trait|type|const) ", stripped):
            statement = stripped
        elif stripped.startswith("#[") or stripped.startswith("//"):
            continue
        else:
            hidden = doctest_only = False
            continue
        if statement.startswith("pub use ") and not statement.endswith(";"):
            continue
        if not (hidden or doctest_only):
            names.extend(_declared(statement))
        statement, hidden, doctest_only = "", False, False
    return names


def _declared(statement):
    if statement.startswith("pub use "):
        body = statement[len("pub use "):].rstrip(";")
        if "{" in body:
            inner = body[body.index("{") + 1: body.rindex("}")]
            return [part.split(" as ")[-1].strip().split("::")[-1]
                    for part in inner.split(",") if part.strip()]
        return [body.split(" as ")[-1].split("::")[-1].strip()]
    return [re.match(r"pub \w+ (\w+)", statement).group(1)]


def counts(root):
    sources = [p.read_text() for p in sorted((root / "src").rglob("*.rs"))]
    manager = methods(sources, "ThrottleManager")
    builder = methods(sources, "ThrottleManagerBuilder")
    names = root_names((root / "src" / "lib.rs").read_text())
    words = sum(len(p.read_text().split()) for p in (root / "docs" / "guide").glob("*.md"))
    live = lambda found: sorted(name for name, deprecated in found if not deprecated)
    return {
        "ThrottleManager methods": live(manager),
        "ThrottleManagerBuilder methods": live(builder),
        "crate root names": sorted(names),
        "guide words": words,
    }


def self_test():
    source = '''
impl<K> ThrottleManager<K>
where
    K: Hash,
{
    /// Kept.
    pub fn kept(&self) -> u8 { if true { 1 } else { 2 } }
    #[deprecated(
        since = "0.4.0",
        note = "use `kept` {"
    )]
    pub fn old(&self) {}
    pub(crate) fn inner(&self) {}
    pub async fn waits(&self) {}
}
impl<K> fmt::Debug for ThrottleManager<K> {
    pub fn not_inherent(&self) {}
}
'''
    assert methods([source], "ThrottleManager") == [("kept", False), ("old", True), ("waits", False)], \
        methods([source], "ThrottleManager")
    lib = '''
pub mod guide {
    pub mod inner {}
}
#[doc(hidden)]
pub mod old_home;
#[cfg(doctest)]
pub struct ReadmeDoctests;
pub use a::{B, C as D,
    E};
pub use f::G;
mod private;
'''
    assert root_names(lib) == ["guide", "B", "D", "E", "G"], root_names(lib)
    print("surface.py self-test: ok")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    over = False
    for what, found in counts(ROOT).items():
        count = found if isinstance(found, int) else len(found)
        ceiling = CEILINGS[what]
        mark = "ok" if count <= ceiling else "OVER"
        over |= count > ceiling
        print(f"{what:32} {count:6} (at most {ceiling}) {mark}")
        if "--list" in sys.argv and not isinstance(found, int):
            print("    " + ", ".join(found))
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
