#!/usr/bin/env python3
# Generates the "used by" column of docs/dependencies.md from the #include
# lines under src/gradmesh/ (and tests/).
#
# A hand-written list of which files use a library goes stale the first time
# someone adds an include. Here each package that provides headers maps to the
# include paths it provides (PROVIDES below); the "used by" cell of its row is
# the sorted list of src/gradmesh/ files (as `layer/file`) whose #include lines
# name one of them. A directory with more than 3 such files is written once,
# as `layer/dir/`. ", tests" is appended when tests/ includes it too, and a
# package only the tests include is written `tests/`. Rows of packages that
# provide no headers (services, data, bench-only tools, iproute2) keep their
# hand-written cell, and every row keeps its "why" column.
#
# Usage: scripts/gen_dependencies.py [--root DIR] [--check]
#   without --check: rewrite the rows of docs/dependencies.md in place;
#   --check: change nothing, exit 1 naming every row whose cell differs.
import argparse
import os
import re
import sys

# package -> regular expressions matched against an #include's path.
PROVIDES = {
    'libopenblas-dev': [r'^cblas\.h$', r'^openblas'],
    'libdnnl-dev': [r'^dnnl', r'^oneapi/dnnl/'],
    'libtomlplusplus-dev': [r'^toml\+\+/'],
    'nlohmann-json3-dev': [r'^nlohmann/json'],
    'libcli11-dev': [r'^CLI/'],
    'zlib1g-dev': [r'^zlib\.h$'],
    'libxxhash-dev': [r'^xxhash\.h$'],
    'libhiredis-dev': [r'^hiredis/'],
    'libgloo-dev': [r'^gloo/'],
    'libcpp-httplib-dev': [r'^httplib\.h$'],
    'libopenmpi-dev': [r'^mpi\.h$'],
    'libgtest-dev': [r'^gtest/', r'^gmock/'],
    'libtorch-dev': [r'^torch/', r'^ATen/', r'^c10/'],
    'pybind11-dev': [r'^pybind11/'],
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
ROW = re.compile(r'^\| (?P<packages>[^|]*?) \| (?P<used>[^|]*?) \| (?P<why>.*) \|$')
COLLAPSE_OVER = 3


def includes_under(top):
    """{path relative to top: [include paths]} for every .h/.cc file under top."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(('.h', '.cc')):
                full = os.path.join(dirpath, name)
                with open(full, encoding='utf-8', errors='replace') as f:
                    found[os.path.relpath(full, top)] = INCLUDE.findall(f.read())
    return found


def users(files, patterns):
    regexes = [re.compile(p) for p in patterns]
    return sorted(path for path, incs in files.items() if any(r.search(i) for r in regexes for i in incs))


def used_by_cell(src_users, test_users):
    if not src_users:
        return '`tests/`' if test_users else None
    by_dir = {}
    for path in src_users:
        by_dir.setdefault(os.path.dirname(path), []).append(path)
    entries = []
    for directory, paths in by_dir.items():
        if len(paths) > COLLAPSE_OVER and directory:
            entries.append(directory + '/')
        else:
            entries.extend(paths)
    cell = ', '.join(f'`{e}`' for e in sorted(entries))
    return cell + (', tests' if test_users else '')


def main():
    ap = argparse.ArgumentParser(description="Generate docs/dependencies.md's used-by column from #includes.")
    ap.add_argument('--root', default='.', help='repository root (default: .)')
    ap.add_argument('--check', action='store_true', help='change nothing; exit 1 if a row is stale')
    args = ap.parse_args()
    doc = os.path.join(args.root, 'docs', 'dependencies.md')
    src = os.path.join(args.root, 'src', 'gradmesh')
    if not os.path.isfile(doc) or not os.path.isdir(src):
        print(f'gen_dependencies: no docs/dependencies.md or src/gradmesh/ under {args.root}', file=sys.stderr)
        return 2
    src_files = includes_under(src)
    test_dir = os.path.join(args.root, 'tests')
    test_files = includes_under(test_dir) if os.path.isdir(test_dir) else {}

    with open(doc, encoding='utf-8') as f:
        lines = f.read().split('\n')
    stale, unused, seen = [], [], set()
    for number, line in enumerate(lines, 1):
        m = ROW.match(line)
        if not m:
            continue
        packages = re.findall(r'`([^`]+)`', m.group('packages'))
        mapped = [p for p in packages if p in PROVIDES]
        if not mapped:
            continue  # no headers: the hand-written cell stays
        patterns = [p for package in mapped for p in PROVIDES[package]]
        seen.update(mapped)
        cell = used_by_cell(users(src_files, patterns), users(test_files, patterns))
        if cell is None:
            unused.append(f'{os.path.relpath(doc, args.root)}:{number}: {", ".join(mapped)}: '
                          f'no file under src/gradmesh/ or tests/ includes it')
            continue
        if cell != m.group('used'):
            stale.append(f'{os.path.relpath(doc, args.root)}:{number}: {", ".join(mapped)}: '
                         f'used by is {m.group("used")}; the includes say {cell}')
            lines[number - 1] = f'| {m.group("packages")} | {cell} | {m.group("why")} |'
    missing = [p for p in PROVIDES if p not in seen]
    for package in missing:
        unused.append(f'{os.path.relpath(doc, args.root)}: no row for {package}')
    for message in stale + unused:
        print(message)
    if args.check:
        print(f'gen_dependencies: {len(stale)} stale row(s), {len(unused)} other problem(s)')
        return 1 if stale or unused else 0
    if stale:
        with open(doc, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines))
    print(f'gen_dependencies: rewrote {len(stale)} row(s) of {os.path.relpath(doc, args.root)}')
    return 1 if unused else 0


if __name__ == '__main__':
    sys.exit(main())
