#!/usr/bin/env python3
# Size budget for the sources under src/.
#
# Checks that no source file (*.h, *.cc, *.html, *.js, *.py) has more than 700
# lines and that no C++ function body is longer than 100 lines, counted from
# the line of its opening brace to the line of its closing brace. A file or
# function that grows past these limits has usually grown a second job; the
# check makes that visible when it happens rather than at the next review.
# Lambdas count towards the function that contains them; classes, structs,
# namespaces, enums and initializer tables are not functions.
#
# Data tables are exempt only through scripts/size_budget_exempt.txt: one
# `path` (the whole file) or `path:function` per line, each with a comment
# giving the reason.
#
# Usage: scripts/check_size_budget.py [--root DIR] [--list N]
# Exit 0 when within budget, 1 with one line per offence, 2 on usage errors.
import argparse
import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 100
SOURCE_SUFFIXES = ('.h', '.cc', '.html', '.js', '.py')
CXX_SUFFIXES = ('.h', '.cc')
CONTROL = {'if', 'for', 'while', 'switch', 'catch'}
SKIPPED_WORDS = {'const', 'noexcept', 'override', 'final', 'mutable', 'volatile', 'try'}
IDENT_TAIL = re.compile(r'[A-Za-z_]\w*$')
ACCESS = re.compile(r'\b(public|private|protected)\s*$')


def strip_cxx(text):
    """Blank out comments, string/char literals (raw strings too) and
    preprocessor lines, keeping every newline so line numbers survive."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == '#':  # preprocessor directive, with continuations
            while i < n and not (text[i] == '\n' and text[i - 1] != '\\'):
                out.append('\n' if text[i] == '\n' else ' ')
                i += 1
            continue
        if c == '\n':
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith('//', i):
            while i < n and text[i] != '\n':
                out.append(' ')
                i += 1
            continue
        if text.startswith('/*', i):
            end = text.find('*/', i + 2)
            end = n if end < 0 else end + 2
            out.extend('\n' if ch == '\n' else ' ' for ch in text[i:end])
            i = end
            continue
        if c == '"' and re.search(r'(?<![\w])(u8|u|U|L)?R$', text[max(0, i - 8):i]) and \
                (i < 8 or re.search(r'[^\w](u8|u|U|L)?R$', text[i - 8:i])):
            m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])
            if m:
                close = ')' + m.group(1) + '"'
                end = text.find(close, i + m.end())
                end = n if end < 0 else end + len(close)
                out.append('"')
                out.extend('\n' if ch == '\n' else ' ' for ch in text[i + 1:end - 1])
                out.append('"')
                i = end
                continue
        if c == "'":
            # A digit separator (1'000'000) is not a character literal.
            token = re.search(r'[\w.]*$', text[max(0, i - 64):i]).group(0)
            if token and token[0].isdigit():
                out.append(' ')
                i += 1
                continue
        if c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            end = min(j + 1, n)
            out.append(c)
            out.extend(' ' for _ in text[i + 1:end - 1])
            out.append(c if end - 1 > i else '')
            i = end
            continue
        out.append(c)
        i += 1
    return ''.join(out)


def match_back(s, pos, open_ch, close_ch):
    """Index of the bracket opening the one that closes at s[pos]."""
    depth = 0
    for k in range(pos, -1, -1):
        if s[k] == close_ch:
            depth += 1
        elif s[k] == open_ch:
            depth -= 1
            if depth == 0:
                return k
    return -1


def skip_ws_back(s, pos):
    while pos >= 0 and s[pos].isspace():
        pos -= 1
    return pos


def skip_name_back(s, pos):
    """Skip a possibly qualified, possibly templated name ending at s[pos]."""
    while pos >= 0:
        if s[pos] == '>':
            k = match_back(s, pos, '<', '>')
            if k < 0:
                return pos
            pos = skip_ws_back(s, k - 1)
        elif s[pos].isalnum() or s[pos] in '_:':
            pos -= 1
        else:
            return pos
    return pos


def function_name(s, paren):
    """The name before the parameter list opening at s[paren]."""
    head = s[max(0, paren - 200):paren].rstrip()
    m = re.search(r'((?:[\w]+(?:<[^<>;{}]*>)?\s*::\s*)*(?:operator\s*(?:\(\)|\[\]|[^\w\s()]+|\s\w[\w\s:*&<>]*)|~?\w+))\s*(<[^<>;{}()]*>)?$', head)
    return re.sub(r'\s+', '', m.group(1)) if m else '?'


def classify(s, pos):
    """What the brace at s[pos] opens: ('function', name) or ('other', class_name)."""
    p = skip_ws_back(s, pos - 1)
    in_init_list = past_init_list = False
    while p >= 0:
        word = IDENT_TAIL.search(s[max(0, p - 40):p + 1])
        if word and word.group(0) in SKIPPED_WORDS:
            p = skip_ws_back(s, p - len(word.group(0)))
            continue
        trailing = re.search(r'->[\w\s:<>,*&]*$', s[max(0, p - 300):p + 1])
        if trailing and not in_init_list:
            p = skip_ws_back(s, p - len(trailing.group(0)))
            continue
        if s[p] in ')}':
            opener = match_back(s, p, '(' if s[p] == ')' else '{', s[p])
            if opener < 0:
                return ('other', None)
            q = skip_ws_back(s, opener - 1)
            before = IDENT_TAIL.search(s[max(0, q - 40):q + 1]) if q >= 0 else None
            w = before.group(0) if before else ''
            if s[p] == ')' and w in ('noexcept', 'throw', 'decltype', '__attribute__', 'alignas'):
                p = skip_ws_back(s, q - len(w))
                continue
            if s[p] == ')' and w in CONTROL:
                return ('other', None)
            if s[p] == ')' and q >= 0 and s[q] == ']':
                return ('function', 'lambda')  # a lambda outside any function
            # Is this item part of a constructor's member-initializer list?
            r = skip_ws_back(s, skip_name_back(s, q))
            colon = r >= 0 and s[r] == ':' and (r == 0 or s[r - 1] != ':') and not ACCESS.search(s[max(0, r - 12):r])
            if not past_init_list and r >= 0 and (s[r] == ',' or colon):
                in_init_list = True
                past_init_list = colon
                p = skip_ws_back(s, r - 1)
                continue
            if s[p] == ')':
                return ('function', function_name(s, opener))
            return ('other', None)
        break
    head = s[max(0, pos - 400):pos]
    head = re.split(r'[;{}]', head)[-1]
    m = re.search(r'\b(?:class|struct|union)\s+(?:\w+\s+)*?(\w+)\s*(?:final\s*)?(?::[^;{}]*)?$', head)
    if m and not re.search(r'\benum\b', head):
        return ('other', m.group(1))
    return ('other', None)


def functions_in(text):
    """(name, first_line, last_line) of every function body in C++ text."""
    s = strip_cxx(text)
    stack = []  # entries: (kind, name, line)
    found = []
    line = 1
    for pos, c in enumerate(s):
        if c == '\n':
            line += 1
        elif c == '{':
            if any(kind == 'function' for kind, _, _ in stack):
                stack.append(('inner', None, line))
                continue
            kind, name = classify(s, pos)
            if kind == 'function' and '::' not in name:
                owners = [n for k, n, _ in stack if k == 'other' and n]
                name = '::'.join(owners + [name])
            stack.append((kind, name, line))
        elif c == '}' and stack:
            kind, name, first = stack.pop()
            if kind == 'function':
                found.append((name, first, line))
    return found


def load_exemptions(path):
    entries = []
    if not os.path.exists(path):
        return entries
    with open(path, encoding='utf-8') as f:
        for number, raw in enumerate(f, 1):
            entry = raw.split('#', 1)[0].strip()
            if entry:
                entries.append((entry, number))
    return entries


def is_exempt(entries, rel, name, used):
    for entry, number in entries:
        path, _, func = entry.partition(':')
        if path != rel:
            continue
        if not func or (name is not None and func in (name, name.split('::')[-1])):
            used.add(number)
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description='Check file and function sizes under src/.')
    ap.add_argument('--root', default='.', help='repository root (default: .)')
    ap.add_argument('--list', type=int, metavar='N', default=0, help='also print the N longest functions')
    ap.add_argument('--exempt', help='exemption list (default: ROOT/scripts/size_budget_exempt.txt)')
    args = ap.parse_args()
    src = os.path.join(args.root, 'src')
    if not os.path.isdir(src):
        print(f'check_size_budget: no src/ under {args.root}', file=sys.stderr)
        return 2
    exempt_path = args.exempt or os.path.join(args.root, 'scripts', 'size_budget_exempt.txt')
    entries = load_exemptions(exempt_path)
    used = set()
    offences, functions = [], []
    files = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for fname in sorted(filenames):
            if not fname.endswith(SOURCE_SUFFIXES):
                continue
            full = os.path.join(dirpath, fname)
            rel = os.path.relpath(full, args.root)
            with open(full, encoding='utf-8', errors='replace') as f:
                text = f.read()
            files += 1
            lines = text.count('\n') + (0 if text.endswith('\n') or not text else 1)
            if lines > MAX_FILE_LINES and not is_exempt(entries, rel, None, used):
                offences.append(f'{rel}:1: file has {lines} lines (limit {MAX_FILE_LINES})')
            if not fname.endswith(CXX_SUFFIXES):
                continue
            for name, first, last in functions_in(text):
                length = last - first + 1
                functions.append((length, rel, first, name))
                if length > MAX_FUNCTION_LINES and not is_exempt(entries, rel, name, used):
                    offences.append(f'{rel}:{first}: function {name} has {length} lines '
                                    f'(limit {MAX_FUNCTION_LINES})')
    for entry, number in entries:
        if number not in used:
            offences.append(f'{os.path.relpath(exempt_path, args.root)}:{number}: '
                            f'exemption {entry} matches no file or function over budget')
    for line in offences:
        print(line)
    if args.list > 0:
        print(f'longest {args.list} functions:')
        for length, rel, first, name in sorted(functions, key=lambda f: (-f[0], f[1], f[2]))[:args.list]:
            print(f'  {length:5d}  {rel}:{first}  {name}')
    print(f'size budget: {len(offences)} offence(s) in {files} files, {len(functions)} functions '
          f'(files <= {MAX_FILE_LINES} lines, functions <= {MAX_FUNCTION_LINES} lines)')
    return 1 if offences else 0


if __name__ == '__main__':
    sys.exit(main())
