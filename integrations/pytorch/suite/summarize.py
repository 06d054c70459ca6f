#!/usr/bin/env python3
"""summarize.py — compares the JUnit XML of a PyTorch test file run on vpmm and on the native
allocator (run.sh writes them): passed / failed / errors / skipped for each, and every test whose
outcome differs, with the first line of its failure message.

    python3 integrations/pytorch/suite/summarize.py OUTDIR/NAME-vpmm.xml OUTDIR/NAME-native.xml
"""
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    res = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = "%s::%s" % (case.get("classname", ""), case.get("name", ""))
        state, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                state = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                msg = (el.get("message") or el.text or "").strip().splitlines()
                msg = msg[0][:200] if msg else ""
                break
        res[name] = (state, msg)
    return res


def counts(res):
    c = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for state, _ in res.values():
        c[state] += 1
    return c


def main(argv):
    a, b = outcomes(argv[1]), outcomes(argv[2])
    print("| run | passed | failed | errors | skipped | total |")
    print("|---|---|---|---|---|---|")
    for label, res in (("vpmm", a), ("native", b)):
        c = counts(res)
        print("| %s | %d | %d | %d | %d | %d |" % (label, c["passed"], c["failed"], c["error"],
                                                   c["skipped"], len(res)))
    diff = sorted(n for n in set(a) | set(b) if a.get(n, ("absent", ""))[0] !=
                  b.get(n, ("absent", ""))[0])
    print("\n%d tests differ" % len(diff))
    for n in diff:
        sa, ma = a.get(n, ("absent", ""))
        sb, mb = b.get(n, ("absent", ""))
        print("- %s: vpmm %s%s; native %s%s" % (n, sa, (" (" + ma + ")") if ma else "", sb,
                                                (" (" + mb + ")") if mb else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
