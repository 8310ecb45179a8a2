#!/usr/bin/env python3
"""Writes src/tokenizer/unicode_tables.cpp: the Unicode data NFC/NFD normalization needs.

Hugging Face tokenizers normalizes with the crate unicode-normalization-alignments 0.1.12,
whose tables are Unicode 9.0.0. Our tables are those of Unicode 9.0.0 too, so that NFC gives
the same text (and the same ids) as tokenizers: characters assigned after 9.0 are left as
unassigned characters are (combining class 0, no decomposition). Unicode's stability policy
makes the 9.0 data of older characters identical in every later version, so the data comes
from Python's unicodedata, restricted by character age (from Perl's Unicode::UCD), and the
tables regenerate without downloading anything:

    python3 tools/peers/gen_unicode_tables.py > src/tokenizer/unicode_tables.cpp

Tables (all sorted, searched by binary search):
  kCombiningClasses       ranges of code points with a non-zero canonical combining class
  kDecompositions         one-level canonical decompositions (Hangul syllables excluded: they
                          are algorithmic)
  kCompositions           primary composites, keyed by (first, second)
  kQuickCheck             ranges flagged kUnsafeNfc / kUnsafeNfd: code points that may change
                          under that form or interact with a neighbour. A code point without
                          the flag is a normalization boundary: text between two of them can be
                          normalized on its own.
"""
import subprocess
import sys
import unicodedata as ud

N = 0x110000
UNICODE_VERSION = (9, 0)  # unicode-normalization-alignments 0.1.12, used by tokenizers


def ages(code_points):
    """The Unicode version (major, minor) in which each code point was assigned."""
    script = ('use Unicode::UCD qw(charprop); while (<STDIN>) { chomp; '
              'print charprop(hex($_), "Age"), "\\n"; }')
    out = subprocess.run(["perl", "-e", script], input="".join(f"{cp:X}\n" for cp in code_points),
                         capture_output=True, text=True, check=True).stdout.split()
    result = {}
    for cp, age in zip(code_points, out):
        assert age.startswith("V"), (hex(cp), age)
        major, minor = age[1:].split("_")
        result[cp] = (int(major), int(minor))
    return result


def valid(cp):
    return not (0xD800 <= cp <= 0xDFFF)


def is_hangul_syllable(cp):
    return 0xAC00 <= cp <= 0xD7A3


def main():
    out = sys.stdout
    # Every code point with normalization data in Python's (newer) Unicode, and its age.
    interesting = [cp for cp in range(N) if valid(cp) and (
        ud.combining(chr(cp)) or ud.decomposition(chr(cp)) or ud.normalize("NFC", chr(cp)) != chr(cp))]
    age = ages(interesting)
    newer = {cp for cp in interesting if age[cp] > UNICODE_VERSION}

    def unassigned_in_target(cp):
        return cp in newer

    decompositions = []  # (cp, first, second)
    compositions = []  # (first, second, cp)
    for cp in range(N):
        if not valid(cp) or is_hangul_syllable(cp) or unassigned_in_target(cp):
            continue
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, hex(cp)
        decompositions.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))
        if len(parts) == 2 and ud.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp):
            compositions.append((parts[0], parts[1], cp))
    compositions.sort()

    ccc = {cp: ud.combining(chr(cp)) for cp in range(N)
           if valid(cp) and ud.combining(chr(cp)) and not unassigned_in_target(cp)}
    second_of_pair = {b for _, b, _ in compositions}
    second_of_pair |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V, T

    def flags(cp):
        if not valid(cp) or unassigned_in_target(cp):
            return 0
        c = chr(cp)
        f = 0
        if cp in ccc or ud.normalize("NFC", c) != c or cp in second_of_pair:
            f |= 1
        if cp in ccc or ud.normalize("NFD", c) != c:
            f |= 2
        return f

    def ranges(value_of):
        result = []
        for cp in range(N):
            v = value_of(cp)
            if not v:
                continue
            if result and result[-1][1] == cp - 1 and result[-1][2] == v:
                result[-1][1] = cp
            else:
                result.append([cp, cp, v])
        return result

    ccc_ranges = ranges(lambda cp: ccc.get(cp, 0))
    unsafe_ranges = ranges(flags)
    first_unsafe_nfc = min(r[0] for r in unsafe_ranges if r[2] & 1)
    first_unsafe_nfd = min(r[0] for r in unsafe_ranges if r[2] & 2)

    def emit(name, rows, per_line):
        out.write(f"const {name}[] = {{\n")
        for i in range(0, len(rows), per_line):
            chunk = rows[i:i + per_line]
            out.write("    " + " ".join("{" + ",".join(f"0x{v:X}" for v in r) + "}," for r in chunk))
            out.write("\n")
        out.write("};\n\n")

    version = ".".join(map(str, UNICODE_VERSION)) + ".0"
    out.write(f"// Generated by tools/peers/gen_unicode_tables.py: Unicode {version} normalization "
              f"data\n// (from Python's unicodedata {ud.unidata_version}, restricted by age). "
              "Do not edit.\n")
    out.write("// clang-format off\n")
    out.write('#include "tokenizer/unicode_tables.h"\n\n')
    out.write("namespace fp8rl::tok::unicode_tables {\n\n")
    out.write(f'const char kUnicodeVersion[] = "{version}";\n')
    out.write(f"const char32_t kFirstUnsafeNfc = 0x{first_unsafe_nfc:X};\n")
    out.write(f"const char32_t kFirstUnsafeNfd = 0x{first_unsafe_nfd:X};\n\n")
    out.write("namespace {\n")
    emit("CodePointRange kCombiningClassData", ccc_ranges, 6)
    emit("Decomposition kDecompositionData", decompositions, 5)
    emit("Composition kCompositionData", compositions, 5)
    emit("CodePointRange kQuickCheckData", unsafe_ranges, 6)
    out.write("}  // namespace\n\n")
    for table in ("CombiningClass", "Decomposition", "Composition", "QuickCheck"):
        kind = {"CombiningClass": "CodePointRange", "QuickCheck": "CodePointRange"}.get(table, table)
        plural = {"CombiningClass": "kCombiningClasses", "Decomposition": "kDecompositions",
                  "Composition": "kCompositions", "QuickCheck": "kQuickCheck"}[table]
        out.write(f"const std::span<const {kind}> {plural}{{k{table}Data}};\n")
    out.write("\n}  // namespace fp8rl::tok::unicode_tables\n")


if __name__ == "__main__":
    main()
