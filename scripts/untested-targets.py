#!/usr/bin/env python3
"""Fails when a library or binary that `cargo test` skips (`test = false` in its manifest)
holds a unit test: such a test would never run, and nothing would say so. Integration test
targets (`[[test]]`) with `test = false` are left alone: CI runs those in steps of their own.

A library's sources are every `.rs` file under its crate's `src/` (minus its binaries' own
files); a binary's, its own file.

Usage: scripts/untested-targets.py [MANIFEST ...]   (default: every manifest of the workspace)
"""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
UNIT_TEST = re.compile(r"#\[(?:[\w:]+::)?test\b|#\[cfg\(test\)\]")


def manifests():
    yield ROOT / "Cargo.toml"
    yield from sorted((ROOT / "crates").glob("*/Cargo.toml"))


def skipped_sources(manifest: pathlib.Path):
    """(target, source files) for each library or binary of `manifest` with `test = false`."""
    toml = tomllib.loads(manifest.read_text())
    if "package" not in toml:
        return
    crate = manifest.parent
    bins = toml.get("bin", [])
    bin_files = {(crate / b.get("path", f"src/bin/{b['name']}.rs")).resolve() for b in bins}
    lib = toml.get("lib", {})
    if lib.get("test", True) is False:
        files = [p for p in sorted((crate / "src").rglob("*.rs")) if p.resolve() not in bin_files]
        yield f"{toml['package']['name']} (lib)", files
    for b in bins:
        if b.get("test", True) is False:
            yield f"{b['name']} (bin)", [crate / b.get("path", f"src/bin/{b['name']}.rs")]


def main(args):
    paths = [pathlib.Path(a).resolve() for a in args] or list(manifests())
    found = []
    for manifest in paths:
        for target, files in skipped_sources(manifest):
            for path in files:
                for number, line in enumerate(path.read_text().splitlines(), 1):
                    if UNIT_TEST.search(line) and not line.lstrip().startswith("//"):
                        rel = path.relative_to(ROOT)
                        found.append(f"{rel}:{number}: a unit test in {target}, which has test = false")
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print("remove `test = false` from the target, or move the test", file=sys.stderr)
        return 1
    print(f"no unit test in a target that cargo test skips ({len(paths)} manifests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
