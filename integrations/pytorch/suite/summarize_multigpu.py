#!/usr/bin/env python3
"""summarize_multigpu.py — the tables of run_multigpu.sh: for each PyTorch test file run on vpmm
and on the native allocator (DIR/NAME-vpmm.xml and DIR/NAME-native.xml, JUnit XML), the passed /
failed / errors / skipped counts, every test whose outcome differs (with the first line of its
message), the tests that fail on both, and the reasons tests were skipped; then, from NCCL's
debug files (DIR/nccl-ALLOCATOR-*.txt, written with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG), how
many buffers NCCL registered, reused or failed to register for each allocator.

    python3 integrations/pytorch/suite/summarize_multigpu.py DIR NAME...

Exit status 1 when a test fails (or errors) on vpmm and passes on native, or when a file's XML is
missing or unreadable for either allocator (the run did not finish: a timeout, a crash); 0
otherwise. Tests that fail on both are listed, not counted: they test something newer than the
installed PyTorch, or the machine.
"""
import collections
import glob
import os
import re
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402  (outcomes(), counts(): the single-file comparison)

ALLOCATORS = ("vpmm", "native")
BAD = ("failed", "error")
# NCCL 2.28 REG lines (src/register/register.cc, src/transport/p2p.cc), in the order shown.
NCCL_PATTERNS = (
    ("registered (ncclCommRegister)", re.compile(r"register comm \S+ buffer")),
    ("skipped registration", re.compile(r"Skipping registration")),
    ("IPC registered", re.compile(r"IPC register buffer")),
    ("IPC reused", re.compile(r"IPC reuse buffer")),
    ("IPC failed", re.compile(r"failed to IPC register")),
    ("deregistered", re.compile(r"deregister", re.I)),
    ("CUDA failures", re.compile(r"Cuda failure")),
    ("warnings", re.compile(r"\bWARN\b")),
)


def load(path):
    """outcomes of a JUnit XML file, or None when it is missing or unreadable."""
    if not os.path.isfile(path):
        return None
    try:
        return summarize.outcomes(path)
    except Exception:  # noqa: BLE001 - a truncated file (killed run) counts as missing
        return None


def nccl_counts(directory, alloc):
    counts = collections.OrderedDict((label, 0) for label, _ in NCCL_PATTERNS)
    files = sorted(glob.glob(os.path.join(directory, "nccl-%s-*.txt" % alloc)))
    for path in files:
        with open(path, errors="replace") as f:
            for line in f:
                for label, pattern in NCCL_PATTERNS:
                    if pattern.search(line):
                        counts[label] += 1
    return len(files), counts


def report(directory, names):
    """(markdown text, list of failures)."""
    out, fails = [], []
    out.append("| file | run | passed | failed | errors | skipped | total |")
    out.append("|---|---|---|---|---|---|---|")
    results = {}
    for name in names:
        for alloc in ALLOCATORS:
            res = load(os.path.join(directory, "%s-%s.xml" % (name, alloc)))
            results[(name, alloc)] = res
            if res is None:
                out.append("| %s | %s | no report (the run did not finish) | | | | |" % (
                    name, alloc))
                fails.append("%s on %s: no JUnit report" % (name, alloc))
                continue
            c = summarize.counts(res)
            out.append("| %s | %s | %d | %d | %d | %d | %d |" % (
                name, alloc, c["passed"], c["failed"], c["error"], c["skipped"], len(res)))
    for name in names:
        a, b = results[(name, "vpmm")], results[(name, "native")]
        if a is None or b is None:
            continue
        diff = sorted(n for n in set(a) | set(b)
                      if a.get(n, ("absent", ""))[0] != b.get(n, ("absent", ""))[0])
        out.append("")
        out.append("%s: %d tests differ" % (name, len(diff)))
        for n in diff:
            sa, ma = a.get(n, ("absent", ""))
            sb, mb = b.get(n, ("absent", ""))
            out.append("- %s: vpmm %s%s; native %s%s" % (n, sa, " (%s)" % ma if ma else "", sb,
                                                        " (%s)" % mb if mb else ""))
            if sa in BAD + ("absent",) and sb not in BAD:
                fails.append("%s: %s %s on vpmm, %s on native" % (name, n, sa, sb))
        both = sorted(n for n in set(a) & set(b) if a[n][0] in BAD and b[n][0] in BAD)
        if both:
            out.append("%s: %d fail on both" % (name, len(both)))
            for n in both:
                out.append("- %s: %s" % (n, a[n][1] or b[n][1]))
        reasons = collections.Counter(m for s, m in a.values() if s == "skipped")
        if reasons:
            out.append("%s: skipped on vpmm, by reason" % name)
            for m, k in reasons.most_common():
                out.append("- %d × %s" % (k, m or "(no reason given)"))
    out.append("")
    out.append("| NCCL (NCCL_DEBUG_SUBSYS=REG) | %s |" % " | ".join(ALLOCATORS))
    out.append("|---|" + "---|" * len(ALLOCATORS))
    per = {alloc: nccl_counts(directory, alloc) for alloc in ALLOCATORS}
    out.append("| debug files | %s |" % " | ".join(str(per[a][0]) for a in ALLOCATORS))
    for label, _ in NCCL_PATTERNS:
        out.append("| %s | %s |" % (label, " | ".join(str(per[a][1][label])
                                                       for a in ALLOCATORS)))
    return "\n".join(out), fails


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    text, fails = report(argv[1], argv[2:])
    print(text)
    for f in fails:
        print("FAIL: " + f)
    print("summary: %d failures" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
