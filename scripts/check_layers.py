#!/usr/bin/env python3
"""Checks that every layer includes only the layers docs/architecture.md allows.

The table in docs/architecture.md ("| `layer` | owns | may use |") is the
decision; this script reads it and every `#include "gradmesh/<layer>/..."`
under src/gradmesh/, and fails on an include the table does not allow, on a
folder the table does not name, and on a table row naming a layer that does
not exist. So the architecture page and the code cannot drift apart.

Usage: python3 scripts/check_layers.py [--root DIR]
Exit status: 0 clean, 1 offences (one line each: file:line: what), 2 usage.
"""
import argparse
import os
import re
import sys

ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|[^|]*\|\s*([^|]*)\|\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"gradmesh/([a-z_]+)/')
EVERY_LAYER = "(every layer)"


def read_table(path):
    """{layer: set of allowed layers, or None for every layer}."""
    allowed = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if not m or m.group(1) == "layer":
                continue
            uses = m.group(2).strip()
            if uses == EVERY_LAYER:
                allowed[m.group(1)] = None
            elif uses.startswith("("):
                allowed[m.group(1)] = set()
            else:
                allowed[m.group(1)] = {u.strip() for u in uses.split(",") if u.strip()}
    return allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="the repository (default: .)")
    args = parser.parse_args()
    doc = os.path.join(args.root, "docs", "architecture.md")
    src = os.path.join(args.root, "src", "gradmesh")
    if not os.path.isfile(doc) or not os.path.isdir(src):
        print(f"check_layers: {args.root} has no docs/architecture.md or src/gradmesh/", file=sys.stderr)
        return 2
    allowed = read_table(doc)
    offences = []
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for layer in folders:
        if layer not in allowed:
            offences.append(f"src/gradmesh/{layer}/: a layer docs/architecture.md's table does not name")
    for layer in allowed:
        if layer not in folders:
            offences.append(f"docs/architecture.md: the table names `{layer}`, which is no folder of src/gradmesh/")
        for used in allowed[layer] or ():
            if used not in folders:
                offences.append(f"docs/architecture.md: `{layer}` may use `{used}`, which is no folder of src/gradmesh/")
    for layer in folders:
        uses = allowed.get(layer)
        if uses is None:
            continue  # every layer, or already reported
        for dirpath, _, files in os.walk(os.path.join(src, layer)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != layer and m.group(1) not in uses:
                            rel = os.path.relpath(path, args.root)
                            offences.append(f"{rel}:{number}: {layer} includes {m.group(1)}, which "
                                            f"docs/architecture.md does not let it use")
    for o in offences:
        print(o)
    print(f"layers: {len(offences)} offence(s) in {len(folders)} layers")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())
