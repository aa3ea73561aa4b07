#!/usr/bin/env python3
# Checks that README.md and docs/*.md name only things that exist.
#
# Documentation rots when the code moves on: a file is renamed, a config key
# or a flag goes away, and the page still names it. This check reports
#   (a) repository paths in inline code (`src/...`, `docs/...`, `examples/...`,
#       `tests/...`, `bench/...`, `scripts/...`, `deploy/...`, `cmake/...`,
#       `.ci/...`, or `layer/file.cc` relative to src/gradmesh/ as
#       docs/dependencies.md writes them; globs such as `train/config*.cc`
#       match with glob), top-level paths in code blocks and prose, and
#       relative link targets, that do not exist;
#   (b) config keys (`section.key` in inline code or code blocks, `key = `
#       under `[section]` in TOML blocks) that `gradmesh docs config` does
#       not list;
#   (c) command-line flags (`--flag`) after `gradmesh CMD` that
#       `gradmesh CMD --help` does not list (subcommands are discovered from
#       `gradmesh --help`), and flag-only inline code (`--resume auto`) in a
#       paragraph about gradmesh that no subcommand takes; flags of other
#       programs (torchrun, mpirun, cmake, kubectl, bench scripts, ...) are
#       not checked;
#   (d) GRADMESH_* names that are neither environment variables
#       (`gradmesh docs env`) nor used by the build or the tests.
#
# Usage: scripts/check_docs.py --binary build/gradmesh [--root .]
#        [--config-keys-from-binary BINARY|FILE]
# Exit 0 when clean, 1 with `file:line: what` per offence, 2 on usage errors.
import argparse
import glob
import os
import re
import subprocess
import sys

PATH_PREFIXES = ('src/', 'docs/', 'examples/', 'tests/', 'bench/', 'scripts/', 'deploy/', 'cmake/', '.ci/')
# Text naming one of these (or a script) is about another program's flags.
OTHER_TOOLS = re.compile(r'\b(torchrun|mpirun|srun|cmake|ctest|kubectl|kustomize|docker|podman|pip3?|python3?|etcd|etcdctl|'
                         r'redis-server|redis-cli|curl|wrk|make|apt|apt-get|ip|tc|ssh|openssl|git|node|chromium|'
                         r'pkg-config|prlimit|buildah|mmdebstrap|torch\.distributed\.run)\b|[\w/]\.(py|sh)\b|\btest_\w+')
# Where a gradmesh invocation starts: `gradmesh`, `build/gradmesh`, `$G/gradmesh`.
INVOCATION = re.compile(r'(?:^|(?<=[\s;&|(`]))(?:[\w.$(){}/-]*/)?gradmesh\s+')
# Languages whose code blocks hold commands (flags) or config (keys).
COMMAND_BLOCKS = ('', 'sh', 'bash', 'console', 'shell', 'text')
CONFIG_BLOCKS = COMMAND_BLOCKS + ('toml',)
flags_in = re.compile(r'(?<![\w-])--[A-Za-z][\w-]*').findall
# A word that is a file extension after a section name is a file
# (`model.safetensors`, `train.bin`), not a config key.
FILE_WORDS = {'safetensors', 'bin', 'json', 'jsonl', 'toml', 'html', 'md', 'txt', 'cc', 'h', 'py', 'sh', 'log', 'gz'}
PLACEHOLDER = re.compile(r'[<>{}$]|\.\.\.|\bN\b|PATH|DIR|FILE')


def fail(message):
    print(f'check_docs: {message}', file=sys.stderr)
    sys.exit(2)


def run_help(binary, args):
    try:
        out = subprocess.run([binary] + args + ['--help'], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        fail(f'cannot run {binary}: {e}')
    return out.stdout + out.stderr


def discover_commands(binary, path=(), table=None):
    """{('bench', 'comm'): set of flags, ...} for every (sub)command."""
    table = {} if table is None else table
    text = run_help(binary, list(path))
    table[path] = set(re.findall(r'(?<![\w-])--[A-Za-z0-9][\w-]*', text))
    sub = text.split('Subcommands:', 1)
    if len(sub) == 2:
        for name in re.findall(r'^  ([a-z][\w-]*)\s', sub[1], re.M):
            if name not in path:
                discover_commands(binary, path + (name,), table)
    return table


def binary_lines(binary, args):
    out = subprocess.run([binary] + args, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        fail(f'{binary} {" ".join(args)} failed: {out.stderr.strip()}')
    return out.stdout


def paragraphs(lines):
    """The paragraph (list item, heading) each line belongs to; a table row
    is its own paragraph, with its section's heading and the word gradmesh
    (a table of flags names gradmesh in its section, not in each row)."""
    groups, current, heading = [], [], ''
    for line in lines:
        stripped = line.strip()
        if not stripped or re.match(r'(```|~~~|\||#|[-*] |\d+\. )', stripped):
            groups.append(current)
            current = []
        heading = stripped if stripped.startswith('#') else heading
        current.append(line + (' ' + heading + ' gradmesh' if stripped.startswith('|') else ''))
    groups.append(current)
    text_of = []
    for group in groups:
        text_of.extend([' '.join(group)] * len(group))
    return text_of


def markdown_spans(text):
    """Yield (line, kind, text, info): kind 'code' for inline code (info:
    the paragraph around it), 'block' for a code block line (info: the
    fence's language), 'link' for a link target, 'prose' for the rest."""
    fence = None
    lines = text.split('\n')
    context = paragraphs(lines)
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        m = re.match(r'(```+|~~~+)\s*(\S*)', stripped)
        if m and (fence is None or stripped.startswith(fence[0])):
            fence = None if fence else (m.group(1), m.group(2))
            continue
        if fence:
            yield number, 'block', line, fence[1]
            continue
        for m in re.finditer(r'(`+)(.+?)\1', line):
            yield number, 'code', m.group(2).strip(), context[number - 1]
        bare = re.sub(r'(`+).+?\1', ' ', line)
        for m in re.finditer(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)', bare):
            yield number, 'link', m.group(1), ''
        m = re.match(r'\s*\[[^\]]+\]:\s*(\S+)', bare)
        if m:
            yield number, 'link', m.group(1), ''
        yield number, 'prose', re.sub(r'\]\([^)]*\)|^\s*\[[^\]]+\]:.*', ' ', bare), ''


def path_exists(root, candidate):
    candidate = candidate.rstrip('/') or '.'
    full = os.path.join(root, candidate)
    if any(ch in candidate for ch in '*?['):
        return bool(glob.glob(full))
    return os.path.exists(full)


def check_path(root, token, bare_ok):
    """None when token is not a path we check, else whether it exists."""
    token = re.sub(r':\d+(-\d+)?$', '', token.strip('<>"\'(),;.:'))
    token = token.split('#')[0]
    if not token or PLACEHOLDER.search(token):
        return None
    if token.startswith(PATH_PREFIXES):
        return path_exists(root, token)
    first = token.split('/')[0]
    if not bare_ok or '/' not in token or not re.fullmatch(r'[\w./*-]+', token):
        return None
    # `serve/batcher` names the pair serve/batcher.{h,cc}.
    suffix = '' if token.endswith('/') or re.search(r'\.\w+$', token.split('/')[-1]) else '.*'
    if re.fullmatch(r'[a-z]\w*', first) and os.path.isdir(os.path.join(root, 'src', 'gradmesh', first)):
        return path_exists(root, os.path.join('src', 'gradmesh', token + suffix))
    if first == 'gradmesh' and not suffix:  # as an #include names it
        return path_exists(root, os.path.join('src', token))
    return None


def command_of(segment, commands):
    """The longest (sub)command path that `segment` starts with."""
    words = segment.split()
    best = ()
    for n in range(1, len(words) + 1):
        if tuple(words[:n]) in commands:
            best = tuple(words[:n])
        else:
            break
    return best


def check_flags(text, commands, union, prose=None):
    """Yield (flag, command) for each flag that the command does not take.
    Only flags after `gradmesh CMD` are checked, up to the end of that
    command (` -- `, a pipe, `;`, `&&` or a comment); the words before it
    belong to whatever started gradmesh. Inline code that is only flags
    (`--resume auto`) is checked against every subcommand's flags when its
    paragraph names gradmesh and no other program or script: prose often
    names the flags of a benchmark script, etcd or redis-server a few
    paragraphs after naming the program, so flags in paragraphs that do not
    name gradmesh are not checked."""
    parts = INVOCATION.split(text)
    for part in parts[1:]:
        part = re.split(r'\s--\s|\s--$|[|;#]|&&', part)[0]
        command = command_of(part, commands)
        if not command and not part.startswith(('--help', '--version')):
            continue  # `gradmesh` here is some other word (a path, an image name)
        for flag in flags_in(part):
            if flag not in commands[command]:
                yield flag, ' '.join(('gradmesh',) + command)
    if prose is not None and len(parts) == 1 and text.startswith('--') and \
            re.search(r'\bgradmesh\b', prose) and not OTHER_TOOLS.search(prose):
        for flag in flags_in(text):
            if flag not in union:
                yield flag, 'any gradmesh command'


def main():
    ap = argparse.ArgumentParser(description='Check that the docs name only existing paths, keys and flags.')
    ap.add_argument('--binary', required=True, help='the built gradmesh executable')
    ap.add_argument('--root', default='.', help='repository root (default: .)')
    ap.add_argument('--config-keys-from-binary', metavar='BINARY|FILE',
                    help="take the config keys from this executable's `docs config`, or from a file "
                         'holding that output (default: --binary)')
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        fail(f'{args.binary} is not an executable')
    if not os.path.isfile(os.path.join(args.root, 'README.md')):
        fail(f'no README.md under {args.root}')
    keys_from = args.config_keys_from_binary or args.binary
    if os.path.isfile(keys_from) and not os.access(keys_from, os.X_OK):
        with open(keys_from, encoding='utf-8') as f:
            keys_text = f.read()
    else:
        keys_text = binary_lines(keys_from, ['docs', 'config'])
    keys = set(re.findall(r'^\| `([\w.]+)` \|', keys_text, re.M))
    if not keys:
        fail(f'no config keys in the output of {keys_from}')
    sections = {k.split('.')[0] for k in keys}
    env_vars = set(re.findall(r'`(GRADMESH_\w+)`', binary_lines(args.binary, ['docs', 'env'])))
    build_names = set()
    for pattern in ('CMakeLists.txt', 'Makefile', 'cmake/*', 'src/**/*', 'tests/**/*', 'bench/*', 'deploy/**/*',
                    '.ci/*', 'scripts/*'):
        for name in glob.glob(os.path.join(args.root, pattern), recursive=True):
            if os.path.isfile(name):
                with open(name, encoding='utf-8', errors='replace') as f:
                    build_names.update(re.findall(r'\bGRADMESH_\w+', f.read()))
    commands = discover_commands(args.binary)
    union = set().union(*commands.values())
    key_re = re.compile(r'(?<![\w./$-])(' + '|'.join(sorted(sections)) + r')\.([a-z_]\w*(?:\.[a-z_]\w*)*)(?![\w/-])')

    pages = ['README.md'] + sorted(os.path.relpath(p, args.root)
                                   for p in glob.glob(os.path.join(args.root, 'docs', '*.md')))
    offences = []
    for rel in pages:
        with open(os.path.join(args.root, rel), encoding='utf-8') as f:
            text = f.read()
        continued, section = '', ''
        for line, kind, span, info in markdown_spans(text):
            where = f'{rel}:{line}'
            if kind == 'block' and info == 'toml':  # `key = ...` under `[section]`
                m = re.match(r'\s*\[([\w.]+)\]|\s*([\w.]+)\s*=', span)
                section = m.group(1) if m and m.group(1) else section
                if m and m.group(2) and section in sections:
                    key = section + '.' + m.group(2)
                    if key not in keys and not any(k.startswith(key + '.') for k in keys):
                        offences.append(f'{where}: config key {key} does not exist (gradmesh docs config)')
                continue
            if kind == 'link':
                if re.match(r'[a-z]+:|#', span):
                    continue
                target = os.path.normpath(os.path.join(os.path.dirname(rel), span.split('#')[0]))
                if not os.path.exists(os.path.join(args.root, target)):
                    offences.append(f'{where}: link target {span} does not exist')
                continue
            # (a) paths: every word of inline code; in code blocks and prose,
            # words under the top-level directories only.
            for token in re.split(r'[\s=,;()|\'"]+', span):
                exists = check_path(args.root, token, bare_ok=(kind == 'code'))
                if exists is False:
                    offences.append(f'{where}: path {token} does not exist')
            if kind == 'prose':
                continue
            # (b) config keys. A TOML block's `[section]` lines are not keys.
            for m in key_re.finditer(span if kind == 'code' or info in CONFIG_BLOCKS else ''):
                key = m.group(0)
                if m.group(2).split('.')[0] in FILE_WORDS or key in keys:
                    continue
                if span[m.end():m.end() + 1] == '(':
                    continue  # a method call on a variable named like a section
                if any(k.startswith(key + '.') for k in keys):
                    continue  # a group of keys, e.g. parallel.mesh
                offences.append(f'{where}: config key {key} does not exist (gradmesh docs config)')
            # (c) flags; a code block line ending in a backslash continues.
            if kind == 'block':
                if info not in COMMAND_BLOCKS:
                    continue
                joined = continued + span
                if span.rstrip().endswith('\\'):
                    start = start if continued else line
                    continued = joined.rstrip()[:-1] + ' '
                    continue
                if continued:
                    where = f'{rel}:{start}'
                continued = ''
                span = joined
            for flag, command in check_flags(span, commands, union, info if kind == 'code' else None):
                offences.append(f'{where}: flag {flag} is not an option of {command}')
            # (d) GRADMESH_* names: the environment registry's, or CMake's
            # and the tests' own (GRADMESH_SANITIZE, GRADMESH_CHAOS_SEED).
            for var in re.findall(r'\bGRADMESH_[A-Z0-9_]*[A-Z0-9]\b', span):
                if var not in env_vars and var not in build_names:
                    offences.append(f'{where}: {var} is neither in gradmesh docs env nor used in the build or tests')
    for line in offences:
        print(line)
    print(f'check_docs: {len(offences)} offence(s) in {len(pages)} pages')
    return 1 if offences else 0


if __name__ == '__main__':
    sys.exit(main())
